"""Wiring of the router process: the aiohttp app, the route watch, start-up and shutdown.

``create_app`` builds the HTTP app around a route table someone else fills (tests fill it
by hand); ``serve`` runs the whole router: HTTP first (so ``/healthz`` answers while the
bus is still unreachable), the ``plnt-routes`` watch beside it, and a graceful stop on
SIGTERM/SIGINT. ``main`` is what ``plnt serve router`` calls. No request logic lives here.
"""

import asyncio
import gc
import signal
from collections.abc import AsyncIterator

from aiohttp import web

from plnt_common import event_loop, health, tracing
from plnt_common.admission import InFlightLimiter
from plnt_common.bus import auth, connect
from plnt_common.errors import BusMisconfigured
from plnt_common.logs import configure_logging, get_logger
from plnt_router.adapters.figures_publisher import FiguresPublisher
from plnt_router.adapters.health_probe import HealthProber
from plnt_router.adapters.route_watch import RouteWatcher
from plnt_router.adapters.shadow_publisher import JetStreamPairPublisher
from plnt_router.adapters.upstream import RunnerClient
from plnt_router.chat import ChatHandlers
from plnt_router.endpoint_health import EndpointHealth
from plnt_router.handlers import Handlers
from plnt_router.metrics import InvocationMetrics, set_queue_depth
from plnt_router.pipeline import INVOKE_PATH, CallPipeline
from plnt_router.responses import json_http_errors
from plnt_router.server import GuardedAppRunner
from plnt_router.settings import RouterSettings
from plnt_router.shadow_mirror import ShadowMirror
from plnt_router.table import RouteTable

log = get_logger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
INVOCATION_METRICS = web.AppKey("plnt_router_invocation_metrics", InvocationMetrics)
"""The app's call counters, which the live figures publisher reads back."""
SHADOW_MIRROR = web.AppKey("plnt_router_shadow_mirror", ShadowMirror)
"""The shadow traffic queue, which publishes its pairs once the bus is connected."""
RUNNER_CLIENT = web.AppKey("plnt_router_runner_client", RunnerClient)
"""The pooled client every call to a runner goes through."""
NATS_RETRY_S = 1.0


def create_app(*, settings: RouterSettings, table: RouteTable) -> web.Application:
    """The router's HTTP app serving from ``table``; its runner pool opens on app start-up."""
    # aiohttp enforces the body limit while reading, which also covers chunked bodies.
    app = web.Application(client_max_size=settings.max_body_bytes, middlewares=[json_http_errors])
    runners = app[RUNNER_CLIENT] = RunnerClient(
        max_connections=settings.max_in_flight, timeout_s=settings.upstream_timeout_s
    )
    set_queue_depth(0)
    metrics = app[INVOCATION_METRICS] = InvocationMetrics()
    shadow = app[SHADOW_MIRROR] = ShadowMirror(
        workers=settings.shadow_workers,
        queue=settings.shadow_queue,
        timeout_s=settings.upstream_timeout_s,
        publish_timeout_s=settings.shadow_publish_timeout_s,
        invoke_path=INVOKE_PATH,
    )
    health = EndpointHealth(
        down_after=settings.endpoint_down_after, ramp_s=settings.endpoint_ramp_s
    )
    prober = HealthProber(
        table=table,
        health=health,
        interval_s=settings.endpoint_probe_interval_s,
        timeout_s=settings.endpoint_probe_timeout_s,
    )
    pipeline = CallPipeline(
        settings=settings,
        table=table,
        health=health,
        runners=runners,
        limiter=InFlightLimiter(
            max_in_flight=settings.max_in_flight,
            max_queue=settings.max_queue,
            on_queue_change=set_queue_depth,
        ),
        metrics=metrics,
        shadow=shadow,
    )
    handlers = Handlers(pipeline=pipeline, table=table)
    chat = ChatHandlers(pipeline=pipeline, table=table, max_json_depth=settings.max_json_depth)

    async def runner_pool(_: web.Application) -> AsyncIterator[None]:
        await runners.start()
        yield
        # Cleanup runs after in-flight handlers finished, so no call loses its connection.
        await runners.close()

    async def shadow_workers(_: web.Application) -> AsyncIterator[None]:
        await shadow.start()
        yield
        await shadow.stop()

    async def endpoint_probes(_: web.Application) -> AsyncIterator[None]:
        probing = asyncio.create_task(prober.run())
        yield
        probing.cancel()
        await asyncio.gather(probing, return_exceptions=True)

    app.cleanup_ctx.append(runner_pool)
    app.cleanup_ctx.append(shadow_workers)
    app.cleanup_ctx.append(endpoint_probes)
    app.router.add_post("/workflows/{name}/invoke", handlers.invoke)
    app.router.add_post("/namespaces/{ns}/workflows/{name}/invoke", handlers.invoke)
    app.router.add_post("/v1/chat/completions", chat.chat_completions)
    app.router.add_get("/v1/models", chat.models)
    app.router.add_get("/healthz", handlers.healthz)
    app.router.add_get("/readyz", handlers.readyz)
    if not settings.metrics_port:  # else on the metrics port only (serve)
        app.router.add_get("/metrics", handlers.metrics)
    return app


def app_runner(app: web.Application, *, settings: RouterSettings) -> web.AppRunner:
    """The runner serving ``app`` with the router's connection rules (see ``server``)."""
    return GuardedAppRunner(
        app,
        header_timeout_s=settings.header_timeout_s,
        keepalive_timeout=settings.keepalive_timeout_s,
        # A call whose client left is cancelled: its slot and runner connection free up.
        handler_cancellation=True,
        # Per-request access logging costs more than the proxying itself; metrics cover it.
        access_log=None,
        shutdown_timeout=settings.shutdown_grace_s,
    )


async def _watch_routes(
    *,
    settings: RouterSettings,
    table: RouteTable,
    metrics: InvocationMetrics,
    shadow: ShadowMirror,
) -> None:
    """Connect to NATS (waiting for it as long as it takes), keep ``table`` current,
    publish the live figures and the shadow pairs."""
    nc = None
    failing = False
    while nc is None:
        # Our own loop rather than the client's retry-on-first-connect: HTTP is already up
        # (liveness must not depend on the bus), and an outage logs one warning, not one
        # per attempt.
        try:
            nc = await connect(settings.nats_url, name="plnt-router")
        except Exception as exc:
            (log.debug if failing else log.warning)(
                "router.waiting_for_nats", url=settings.nats_url, error=str(exc)
            )
            failing = True
            await asyncio.sleep(NATS_RETRY_S)
    log.info("router.nats_connected", url=settings.nats_url)
    shadow.publish_with(JetStreamPairPublisher(nc=nc, timeout_s=settings.shadow_publish_timeout_s))
    try:
        await asyncio.gather(
            RouteWatcher(nc=nc, table=table).run(),
            FiguresPublisher(nc=nc, metrics=metrics, interval_s=settings.figures_interval_s).run(),
        )
    finally:
        shadow.publish_with(None)
        await nc.close()


async def serve(*, settings: RouterSettings, stop: asyncio.Event | None = None) -> None:
    """Run the router until SIGTERM/SIGINT (or ``stop`` is set), then stop gracefully.

    Graceful means: stop accepting connections, let in-flight calls finish for up to
    ``shutdown_grace_s``, then close the runner pool and the NATS connection.
    """
    stop = stop or asyncio.Event()
    table = RouteTable()
    app = create_app(settings=settings, table=table)
    runner = app_runner(app, settings=settings)
    await runner.setup()
    freeze_startup_objects()
    site = web.TCPSite(runner, settings.host, settings.port)
    await site.start()
    port = runner.addresses[0][1]
    url = f"http://{settings.host}:{port}"
    print(f"listening on {url}", flush=True)
    log.info("router.listening", url=url)

    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    watch = asyncio.create_task(
        _watch_routes(
            settings=settings,
            table=table,
            metrics=app[INVOCATION_METRICS],
            shadow=app[SHADOW_MIRROR],
        )
    )
    probes = None
    if settings.metrics_port:
        probes = await health.serve_probes(settings.metrics_port)
        log.info("metrics.serving", port=settings.metrics_port)
    try:
        await stop.wait()
        log.info("router.stopping", grace_s=settings.shutdown_grace_s)
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
        if probes is not None:
            await probes.cleanup()
        await runner.cleanup()
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        log.info("router.stopped")


def freeze_startup_objects() -> None:
    """Move every object alive after start-up out of the garbage collector's sight.

    Modules, pydantic schemas, metrics and the app live as long as the process; left in
    the collector's oldest generation, each full collection walks all of them and stops
    the event loop for about 15 ms, which showed as the router's p99 at 500 calls/s.
    Frozen, a full collection only walks what calls allocated since.
    """
    gc.collect()
    gc.freeze()


def main() -> None:
    """Entry point of ``plnt serve router``: settings from the environment, JSON logs."""
    settings = RouterSettings()
    configure_logging(level=settings.log_level, fmt=settings.log_format, service="router")
    try:
        auth.connect_options()
    except BusMisconfigured as exc:
        raise SystemExit(f"plnt: {exc}") from None
    if settings.auth == "keys" and not settings.api_keys:
        raise SystemExit(
            "plnt: PLNT_ROUTER_AUTH is keys but PLNT_ROUTER_API_KEYS names no key: give each "
            "namespace's key, or set PLNT_ROUTER_AUTH=none to take calls without keys"
        )
    tracing.setup_or_exit("router")  # OTEL_EXPORTER_OTLP_ENDPOINT unset: nothing installed
    event_loop.run(serve(settings=settings))
