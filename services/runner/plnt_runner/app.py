"""Wiring of the runner process: load the workflow, build the executor, serve HTTP.

``create_app`` returns the aiohttp application (routes in ``handlers``), ``serve_app`` runs
it until SIGTERM or SIGINT and then shuts down gracefully, ``serve`` is the whole process
(``python -m plnt_runner``, ``plnt serve runner``, and what an image's own ``__main__`` calls
after its set-up). No request handling and no workflow logic live here.
"""

import asyncio
import gc
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Mapping

import aiohttp
from aiohttp import web
from pydantic import ValidationError

from plnt_common import event_loop, tracing
from plnt_common.errors import PlntError, SpecInvalid
from plnt_common.logs import configure_logging, get_logger
from plnt_common.workflow import parse_workflow, spec_digest
from plnt_runner import handlers
from plnt_runner.adapters.http_post import AiohttpPoster
from plnt_runner.adapters.nvml import GpuProbe
from plnt_runner.adapters.openai_chat import OpenAIChatProvider
from plnt_runner.admission import Admission
from plnt_runner.cache import StepCache
from plnt_runner.code_tools import load_code_tools
from plnt_runner.executor import Executor
from plnt_runner.offline import OfflineProvider
from plnt_runner.ports import LLMProvider
from plnt_runner.settings import RunnerSettings
from plnt_runner.state import RunnerState
from plnt_runner.tools import Tool, build_tools
from plnt_runner.traced_llm import TracedLLM

log = get_logger("plnt.runner")
CUT_AFTER_DRAIN_S = 0.5
"""After the drain, how long aiohttp gives a call that outlived it before cancelling it."""


def create_app(settings: RunnerSettings, *, provider: LLMProvider | None = None) -> web.Application:
    """The runner's web application for ``settings.workflow_file``.

    ``provider`` replaces the LLM provider chosen from settings (OpenAI-compatible when
    ``llm_base_url`` is set, offline otherwise). Raises ``SpecInvalid`` when the workflow file
    cannot be read or is not a valid workflow this runner can execute, ``CodeToolMissing``
    when a tool of ``spec.tools`` cannot be imported.
    """
    try:
        raw = settings.workflow_file.read_bytes()
    except OSError as exc:
        raise SpecInvalid(
            f"cannot read workflow file {settings.workflow_file}: {exc.strerror or exc}"
        ) from None
    workflow = parse_workflow(raw)
    code_tools = load_code_tools(workflow.spec.tools)  # at start: a missing one stops us now
    state = RunnerState(
        settings=settings,
        workflow=workflow,
        digest=spec_digest(raw),
        admission=Admission(max_in_flight=settings.max_in_flight, max_queue=settings.max_queue),
        cache=StepCache(max_entries=settings.cache_size) if settings.cache_size else None,
    )
    app = web.Application(
        client_max_size=settings.max_body_bytes, middlewares=[handlers.track_calls]
    )
    app[handlers.STATE] = state
    app[handlers.CALLS] = handlers.Calls()
    app.cleanup_ctx.append(_runtime(provider, code_tools))
    app.on_response_prepare.append(handlers.add_revision_header)
    app.router.add_post("/invoke", handlers.invoke)
    app.router.add_get("/healthz", handlers.healthz)
    app.router.add_get("/metrics", handlers.metrics)
    return app


def _runtime(
    provider: LLMProvider | None, code_tools: Mapping[str, Tool]
) -> Callable[[web.Application], AsyncIterator[None]]:
    """Startup and cleanup: one pooled client session for the LLM and ``http.request``,
    closed only after in-flight requests are done (aiohttp runs cleanup contexts last)."""

    async def runtime(app: web.Application) -> AsyncIterator[None]:
        state = app[handlers.STATE]
        settings = state.settings
        connector = aiohttp.TCPConnector(limit=max(100, 4 * settings.max_in_flight))
        async with aiohttp.ClientSession(connector=connector) as session:
            llm = provider or _provider_from(settings, session)
            if tracing.ENABLED:  # a span per LLM call; untraced, the provider is called bare
                llm = TracedLLM(
                    llm,
                    default_model=settings.llm_model,
                    input_price_per_mtok_usd=settings.llm_input_price_per_mtok_usd,
                    output_price_per_mtok_usd=settings.llm_output_price_per_mtok_usd,
                )
            poster = AiohttpPoster(session=session, timeout_s=settings.step_timeout_s)
            state.executor = Executor(
                workflow=state.workflow,
                digest=state.digest,
                tools={
                    **build_tools(
                        llm=llm,
                        http=poster,
                        vars=state.workflow.spec.vars,
                        structured_outputs=settings.llm_structured_outputs,
                    ),
                    **code_tools,
                },
                cache=state.cache,
                step_timeout_s=settings.step_timeout_s,
            )
            state.provider = llm.name
            state.gpu = GpuProbe.open()
            try:
                yield
            finally:
                if state.gpu is not None:
                    state.gpu.close()
                state.gpu = None
                state.executor = None

    return runtime


def _provider_from(settings: RunnerSettings, session: aiohttp.ClientSession) -> LLMProvider:
    if not settings.llm_base_url:
        return OfflineProvider()
    return OpenAIChatProvider(
        session=session,
        base_url=settings.llm_base_url,
        model=settings.llm_model,
        api_key=settings.llm_api_key,
        timeout_s=settings.step_timeout_s,
    )


async def serve_app(settings: RunnerSettings) -> None:
    """Serve until SIGTERM or SIGINT, then stop accepting connections and let in-flight
    invocations finish (up to ``shutdown_timeout_s``).

    Prints ``listening on http://host:port`` to stdout once the socket listens: other
    processes read that line to learn the port when ``port`` is 0.
    """
    app = create_app(settings)
    # The calls in flight are waited for by ``_drain``; what is left after it is cut.
    runner = web.AppRunner(
        app, access_log=None, handle_signals=False, shutdown_timeout=CUT_AFTER_DRAIN_S
    )
    await runner.setup()
    # Start-up objects (modules, pydantic schemas, the executor) live as long as the
    # process: frozen, a full garbage collection no longer walks them and no longer stops
    # every in-flight invocation for ~15 ms.
    gc.collect()
    gc.freeze()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        sock = _listen(settings.host, settings.port)
        await web.SockSite(runner, sock).start()
        url = _url(sock)
        print(f"listening on {url}", flush=True)
        state = app[handlers.STATE]
        log.info(
            "listening",
            url=url,
            workflow=state.name,
            version=state.workflow.metadata.version,
            digest=state.digest,
            revision=settings.revision,
            provider=state.provider,
        )
        watchdog = (
            asyncio.create_task(_stop_when_gone(settings.exit_with_pid, stop))
            if settings.exit_with_pid
            else None
        )
        await stop.wait()
        if watchdog is not None:
            watchdog.cancel()
        log.info("shutting_down", in_flight=state.admission.in_flight)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await _drain(app, runner, settings.shutdown_timeout_s)
        await runner.cleanup()
    log.info("stopped")


async def _drain(app: web.Application, runner: web.AppRunner, timeout_s: float) -> None:
    """Stop listening and take no new call, then wait up to ``timeout_s`` for the calls in
    flight. aiohttp's own shutdown stops reading request bodies at once, which would leave a
    call whose body is still arriving unanswered."""
    calls = app[handlers.CALLS]
    calls.stopping = True
    for site in list(runner.sites):
        await site.stop()
    if not await calls.drained(timeout_s):
        log.warning("drain_timed_out", active=calls.active, timeout_s=timeout_s)


async def _stop_when_gone(pid: int, stop: asyncio.Event) -> None:
    """Set ``stop`` once ``pid`` no longer exists (polled: there is no portable pid wait)."""
    while not stop.is_set():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            log.info("owner_gone", pid=pid)
            stop.set()
            return
        except PermissionError:
            pass  # alive, owned by another user
        await asyncio.sleep(1.0)


def _listen(host: str, port: int) -> socket.socket:
    """A bound TCP socket; binding ourselves is how port 0 tells us the port it picked."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(settings: RunnerSettings | None = None) -> None:
    """Run plnt's runner over the workflow and its tools until SIGTERM or SIGINT: what
    ``python -m plnt_runner`` and ``plnt serve runner`` do.

    ``settings`` defaults to the ``PLNT_RUNNER_*`` environment. An image's own ``__main__``
    may do its set-up first (logging, clients its tools share, ``sys.path``) and then call
    this; the spec's code tools are imported here, after that set-up. It returns after a
    signal-driven shutdown and raises ``SystemExit``: 2 on bad settings, 1 on a workflow it
    cannot serve (a bad spec, a code tool whose module or function is missing) or an unusable
    port, 130 on Ctrl-C during start-up.
    """
    if settings is None:
        try:
            settings = RunnerSettings()
        except ValidationError as exc:
            message = _describe_settings_error(exc)
            print(f"plnt runner: invalid settings: {message}", file=sys.stderr)
            raise SystemExit(2) from None
    configure_logging(level=settings.log_level, fmt=settings.log_format, service="runner")
    try:
        tracing.setup("runner")  # OTEL_EXPORTER_OTLP_ENDPOINT unset: nothing installed
        event_loop.run(serve_app(settings))
    except KeyboardInterrupt:  # Ctrl-C before the signal handlers were installed
        raise SystemExit(130) from None
    except (PlntError, OSError) as exc:
        log.error("runner_failed", cause=str(exc))
        print(f"plnt runner: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


def main() -> None:
    """Entry point of ``plnt serve runner``: ``serve()`` with the ``PLNT_RUNNER_*`` settings."""
    serve()


def _describe_settings_error(exc: ValidationError) -> str:
    """Name environment variables rather than field names: that is what users set."""
    problems = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"])
        problems.append(f"PLNT_RUNNER_{field.upper()}: {error['msg']}")
    return "; ".join(problems)
