"""What a service's probes ask: ``/healthz`` (its event loop answers) and ``/readyz`` (its
bus connection is up and its consumers are bound), next to ``/metrics`` on its metrics
port.

Both are answered by an aiohttp app on the service's own event loop, so a loop that is
blocked leaves ``/healthz`` unanswered and the kubelet's liveness probe restarts the pod;
prometheus_client's server thread answered while the loop hung.
"""

from aiohttp import web
from prometheus_client import REGISTRY
from prometheus_client.exposition import choose_encoder

from plnt_common.bus.connection import any_connected

_bound: dict[str, bool] = {}
"""Each consumer of this process by durable name: bound to its durable, or not (yet)."""


def consumer_bound(durable: str, bound: bool) -> None:
    """Called by a consumer as it binds to its durable (True) and loses it (False)."""
    _bound[durable] = bound


def readiness() -> tuple[bool, str]:
    """Ready, and the reason when not."""
    if not any_connected():
        return False, "not connected to NATS"
    unbound = sorted(name for name, bound in _bound.items() if not bound)
    if unbound:
        return False, f"consumers not bound: {', '.join(unbound)}"
    return True, "ready"


async def healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def readyz(_: web.Request) -> web.Response:
    ready, reason = readiness()
    return web.Response(status=200 if ready else 503, text=f"{reason}\n")


async def metrics(request: web.Request) -> web.Response:
    """The default registry, as OpenMetrics (with exemplars) when the scraper asks for it."""
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    response = web.Response(body=encoder(REGISTRY))
    response.headers["Content-Type"] = content_type
    return response


def probe_app() -> web.Application:
    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app


async def serve_probes(port: int, host: str = "0.0.0.0") -> web.AppRunner:
    """Start the probe app on ``port``; the caller cleans the returned runner up."""
    runner = web.AppRunner(probe_app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
