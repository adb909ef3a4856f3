"""Wiring of the console process: the aiohttp app, the runs and figures watches, start-up.

``create_app`` builds the HTTP app around a ``Board`` and a bus session someone else
opened (tests pass their own) and where WorkflowRuns live (``RunAccess``: the embedded
store by default, the Kubernetes API with ``PLNT_CONSOLE_SOURCE=kubernetes``); ``serve``
runs the whole console; ``main`` is what ``plnt serve console`` calls. The pages are
static files under ``static/``.
"""

import asyncio
import contextlib
import json
import signal
from collections.abc import AsyncIterator, Callable
from importlib import resources
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from nats.js.errors import KeyDeletedError, KeyNotFoundError
from nats.js.kv import KeyValue
from pydantic import ValidationError

from plnt_cli.commands import Session
from plnt_cli.operate import RunAccess, StoreRuns, operate
from plnt_common import event_loop, subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.kv_mirror import KvMirror
from plnt_common.errors import (
    BusUnavailable,
    KubernetesUnavailable,
    PlntError,
    ResourceNotFound,
    SpecInvalid,
    SpecNotFound,
)
from plnt_common.figures import RouterFigures
from plnt_common.kube_errors import KubernetesRejected
from plnt_common.logs import configure_logging, get_logger
from plnt_common.operations import Operation
from plnt_common.projection import RunProjection, run_key
from plnt_common.resource_store import ResourceStore
from plnt_console.board import Board, sse_frame
from plnt_console.guard import check_bind, token_middleware
from plnt_console.settings import ConsoleSettings
from plnt_console.timeline import timeline
from plnt_console.traces import TRACEPARENT, trace_id
from plnt_console.workflow_view import read_pulled, workflow_view

log = get_logger(__name__)

STATIC = Path(str(resources.files("plnt_console") / "static"))
SESSION = web.AppKey("plnt_console_session", Session)
BOARD = web.AppKey("plnt_console_board", Board)
RUNS = web.AppKey("plnt_console_runs", RunAccess)
KEEPALIVE_S = 15.0
INVOKE_TIMEOUT_S = 120.0
STOP_S = 2.0


def create_app(
    *, board: Board, session: Session, token: str = "", runs: RunAccess | None = None
) -> web.Application:
    """``runs``: where WorkflowRuns are read and annotated; None is the session's store."""
    app = web.Application(middlewares=[token_middleware(token)])
    app[BOARD] = board
    app[SESSION] = session
    app[RUNS] = runs or StoreRuns(session.store)
    app.router.add_get("/", index)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/api/runs", list_runs)
    app.router.add_get("/api/events", events)
    app.router.add_get("/api/runs/{ns}/{name}", get_run)
    app.router.add_get("/api/runs/{ns}/{name}/timeline", get_timeline)
    app.router.add_get("/api/runs/{ns}/{name}/workflow", get_workflow)
    app.router.add_post("/api/runs/{ns}/{name}/invoke", invoke)
    app.router.add_post("/api/runs/{ns}/{name}/{operation}", run_operation)
    app.router.add_static("/static/", STATIC, show_index=False)
    return app


async def index(_: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC / "index.html")


async def healthz(_: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def list_runs(request: web.Request) -> web.Response:
    runs = request.app[BOARD].runs
    return web.json_response({"runs": [runs[key] for key in sorted(runs)]})


async def events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: the whole state first, then each change as it happens."""
    board = request.app[BOARD]
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    queue = board.follow()
    try:
        while True:
            try:
                message = await asyncio.wait_for(queue.get(), timeout=KEEPALIVE_S)
            except TimeoutError:
                await response.write(b": keepalive\n\n")
                continue
            if message is None:
                break
            await response.write(sse_frame(message))
    except ConnectionResetError:
        pass  # the page went away
    finally:
        board.leave(queue)
    return response


async def get_run(request: web.Request) -> web.Response:
    """The WorkflowRun where it lives (the store, or the API server in Kubernetes mode);
    where that has none, the run's status as its projection in ``plnt-runs`` has it."""
    ns, name = request.match_info["ns"], request.match_info["name"]
    session = request.app[SESSION]
    try:
        body = await request.app[RUNS].read(namespace=ns, name=name)
    except (KubernetesRejected, KubernetesUnavailable) as exc:
        return _kube_error(exc)
    if body is not None:
        return web.json_response(body)
    projection = await _projection(session.bus, ns, name)
    if projection is None:
        return _error(404, f"workflowruns {name!r} not found in namespace {ns!r}")
    status = projection.status.model_dump(mode="json", by_alias=True, exclude_none=True)
    return web.json_response(
        {"kind": "WorkflowRun", "metadata": {"namespace": ns, "name": name}, "status": status}
    )


async def _projection(bus: Bus, ns: str, name: str) -> RunProjection | None:
    try:
        entry = await bus.runs.get(run_key(ns, name))
    except (KeyNotFoundError, KeyDeletedError):
        return None
    projection = _decode_run(entry)
    return None if projection is None or projection.removed else projection


async def get_timeline(request: web.Request) -> web.Response:
    ns, name = request.match_info["ns"], request.match_info["name"]
    bus = request.app[SESSION].bus
    found = await timeline(bus.nc, bus.js, namespace=ns, name=name)
    if not found["sagas"]:
        return _error(404, f"no events for {ns}/{name} in the stream")
    return web.json_response(found)


async def get_workflow(request: web.Request) -> web.Response:
    """The workflow the run pulled (its ``specDigest``): its input form and DAG.

    The digest comes from the run's projection (``plnt-runs``, there on every platform),
    else from the stored WorkflowRun's status."""
    ns, name = request.match_info["ns"], request.match_info["name"]
    session = request.app[SESSION]
    summary = request.app[BOARD].runs.get(f"{ns}.{name}")
    status: dict[str, Any] = {}
    if summary is None:
        try:
            body = await request.app[RUNS].read(namespace=ns, name=name)
        except (KubernetesRejected, KubernetesUnavailable) as exc:
            return _kube_error(exc)
        if body is None:
            return _error(404, f"workflowruns {name!r} not found in namespace {ns!r}")
        status = body.get("status") or {}
    digest = (summary or {}).get("specDigest") or status.get("specDigest") or ""
    if not digest:
        phase = (summary or {}).get("phase") or status.get("phase") or "Pending"
        return _error(409, f"{ns}/{name} has not pulled its workflow yet (phase {phase})")
    try:
        workflow = await read_pulled(session.bus.specs, digest)
    except SpecNotFound as exc:
        return _error(404, str(exc))
    except SpecInvalid as exc:
        return _error(422, str(exc))
    except BusUnavailable as exc:
        return _error(503, str(exc))
    return web.json_response(workflow_view(workflow, digest=digest))


async def run_operation(request: web.Request) -> web.Response:
    """promote|abort|rollback through the CLI's own path; the answer names the outcome."""
    ns, name = request.match_info["ns"], request.match_info["name"]
    try:
        operation = Operation(request.match_info["operation"])
    except ValueError:
        return _error(404, f"unknown operation {request.match_info['operation']!r}")
    full = request.query.get("full") == "1"
    steps: list[str] = []
    try:
        outcome = await operate(
            request.app[SESSION],
            operation,
            name=name,
            namespace=ns,
            full=full,
            say=steps.append,
            runs=request.app[RUNS],
        )
    except ResourceNotFound as exc:
        return _error(404, str(exc))
    except (KubernetesRejected, KubernetesUnavailable) as exc:
        return _kube_error(exc, steps=steps)
    except PlntError as exc:
        return _error(409, str(exc), steps=steps)
    return web.json_response({"ok": True, "message": outcome, "steps": steps})


async def invoke(request: web.Request) -> web.StreamResponse:
    """Sends the body to the run's endpoint (the router) and streams its answer back,
    with the revision that served it and the call's trace id when the router gave one."""
    ns, name = request.match_info["ns"], request.match_info["name"]
    summary = request.app[BOARD].runs.get(f"{ns}.{name}")
    endpoint = (summary or {}).get("endpoint", "")
    if not endpoint:
        phase = (summary or {}).get("phase", "unknown")
        return _error(409, f"{ns}/{name} has no endpoint yet (phase {phase})")
    try:
        body: Any = json.loads(await request.text())
    except ValueError as exc:
        return _error(422, f"the body is not JSON: {exc}")
    stream = request.query.get("stream") == "1"
    headers = {"Accept": "text/event-stream"} if stream else {}
    timeout = aiohttp.ClientTimeout(total=INVOKE_TIMEOUT_S)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as http,
            http.post(endpoint, json=body, headers=headers) as upstream,
        ):
            parent = upstream.headers.get(TRACEPARENT, "")
            answer = web.StreamResponse(
                status=upstream.status,
                headers={
                    "Content-Type": upstream.headers.get("Content-Type", "application/json"),
                    "x-plnt-revision": upstream.headers.get("x-plnt-revision", ""),
                    "x-plnt-trace-id": trace_id(parent),
                },
            )
            await answer.prepare(request)
            async for chunk in upstream.content.iter_any():
                await answer.write(chunk)
            await answer.write_eof()
            return answer
    except aiohttp.ClientError as exc:
        return _error(502, f"cannot reach the router at {endpoint}: {exc}")


def _error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"ok": False, "error": message, **extra}, status=status)


def _kube_error(exc: PlntError, **extra: Any) -> web.Response:
    """The API server refused (403 and the like: asking again changes nothing) or did not
    answer (502); the message says which call and, for a 403, the permission missing."""
    return _error(403 if isinstance(exc, KubernetesRejected) else 502, str(exc), **extra)


def _decode_run(entry: KeyValue.Entry) -> RunProjection | None:
    try:
        return RunProjection.model_validate_json(entry.value or b"")
    except ValidationError:
        return None


@contextlib.asynccontextmanager
async def follow_bus(board: Board, bus: Bus) -> AsyncIterator[None]:
    """Runs mirror and figures subscription for as long as the context is held."""

    async def replace_all(runs: Any) -> None:
        board.replace_runs(runs)

    async def apply(key: str, projection: RunProjection | None) -> None:
        board.apply_run(key, projection)

    async def on_figures(msg: Any) -> None:
        with contextlib.suppress(ValidationError):
            board.add_figures(RouterFigures.model_validate_json(msg.data))

    mirror = KvMirror(
        nc=bus.nc,
        bucket=subjects.RUNS_BUCKET,
        decode=_decode_run,
        replace_all=replace_all,
        apply=apply,
        log_as="console-runs",
    )
    task = asyncio.create_task(mirror.run(), name="plnt-console-runs")
    subscription = await bus.nc.subscribe(subjects.router_figures_filter(), cb=on_figures)
    try:
        yield
    finally:
        board.close_pages()
        await subscription.unsubscribe()
        task.cancel()
        await asyncio.wait({task}, timeout=STOP_S)  # bounded: a stop never hangs on the watch


async def serve(settings: ConsoleSettings) -> None:
    token = settings.token.get_secret_value() if settings.token else ""
    check_bind(settings.host, token)
    runs_on = run_access(settings)  # before the bus: a missing kubeconfig is said at once
    bus = await Bus.open(settings.nats_url, service="console", wait_for_server=True)
    board = Board()
    session = Session(bus=bus, store=ResourceStore(bus))
    runs = runs_on(bus) if runs_on else None
    app = create_app(board=board, session=session, token=token, runs=runs)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port)
    await site.start()
    log.info("console.listening", url=f"http://{settings.host}:{settings.port}/")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with follow_bus(board, bus):
        await stop.wait()
    await runner.cleanup()
    await bus.close()


def run_access(settings: ConsoleSettings) -> Callable[[Bus], RunAccess] | None:
    """Where the buttons find WorkflowRuns, made on the console's bus: the API server in
    Kubernetes mode, else None (the embedded store). Raises ``KubernetesUnavailable``
    when Kubernetes mode finds no configuration."""
    if settings.source != "kubernetes":
        return None
    # Imported here so the embedded mode never loads the Kubernetes client.
    from plnt_common.kube import api_client
    from plnt_console.adapters.kube_runs import KubernetesRuns

    api = api_client(
        kubeconfig=settings.kubeconfig, context=settings.kube_context, user_agent="plnt-console"
    )
    return lambda bus: KubernetesRuns(
        api=api, runs_bucket=bus.runs, request_timeout_s=settings.kube_request_timeout_s
    )


def main() -> None:
    """Entry point of ``plnt serve console``: settings from the environment, JSON logs."""
    settings = ConsoleSettings()
    configure_logging(level=settings.log_level, fmt=settings.log_format, service="console")
    event_loop.run(serve(settings))
