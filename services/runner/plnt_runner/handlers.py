"""HTTP handlers of the runner: ``POST /invoke`` (JSON or SSE), ``/healthz``, ``/metrics``.

They decode the request, take an admission slot, call the executor and encode what it
returns; every error is JSON with a clear message. They decide nothing about the workflow.

A call with ``x-plnt-shadow: 1`` is a shadow call (side-effect tools answer their dry run);
one with it or with ``x-plnt-effects: 1`` is answered with ``x-plnt-effects``, the JSON list
of its side-effect calls (``plnt_runner.effects``). An SSE answer's headers leave before the
calls are known: there the list is the ``effects`` field of the final ``result`` or
``error`` event. Calls beyond the list's cap are counted in ``x-plnt-effects-dropped``
(SSE: ``effects_dropped``), sent only when some were.
"""

import asyncio
import json
import time
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics

from plnt_common import tracing
from plnt_common.admission import Saturated
from plnt_common.logs import get_logger
from plnt_common.shadow_pairs import (
    EFFECTS_REQUEST_HEADER,
    EFFECTS_RESPONSE_HEADER,
    SHADOW_HEADER,
)
from plnt_runner.effects import EffectLog
from plnt_runner.errors import StepFailed
from plnt_runner.executor import Event, Executor, Invocation, StepFinished
from plnt_runner.metrics import SHADOW_CALLS
from plnt_runner.response import (
    error_body,
    invocation_body,
    invocation_usage,
    step_event,
    token_event,
)
from plnt_runner.shadow import flag_set
from plnt_runner.state import RunnerState

STATE = web.AppKey("plnt_runner_state", RunnerState)
REVISION_HEADER = "x-plnt-revision"
TOKENS_HEADER = "x-plnt-tokens"
"""``<prompt>,<completion>`` tokens the call spent: the router adds them to its counters."""
COST_HEADER = "x-plnt-cost-usd"
"""The call's LLM cost in US dollars at the backend's prices."""
DRAINING_HEADER = "x-plnt-draining"
"""On the 503 a stopping runner answers a new request with: that call was not run."""
RETRY_AFTER_S = 1
EFFECTS_DROPPED_HEADER = "x-plnt-effects-dropped"
"""Side-effect calls left out of ``x-plnt-effects`` (over its cap); absent when none were."""
"""Retry-After on 429: invocations take about a second, so a slot frees up within one."""

log = get_logger("plnt.runner.http")


class CallMode:
    """What the caller asked of this invocation beyond its body: a shadow call, a list of
    side-effect calls in the answer."""

    __slots__ = ("effects", "shadow")

    def __init__(self, request: web.Request) -> None:
        self.shadow = flag_set(request.headers.get(SHADOW_HEADER))
        wants_effects = self.shadow or flag_set(request.headers.get(EFFECTS_REQUEST_HEADER))
        self.effects = EffectLog() if wants_effects else None

    def headers(self) -> dict[str, str]:
        """The ``x-plnt-effects`` answer headers; none when they were not asked for."""
        if self.effects is None:
            return {}
        headers = {EFFECTS_RESPONSE_HEADER: self.effects.header_value()}
        if self.effects.dropped:
            headers[EFFECTS_DROPPED_HEADER] = str(self.effects.dropped)
        return headers

    def event_fields(self) -> dict[str, Any]:
        """The same, as fields of the SSE ``result`` or ``error`` event."""
        if self.effects is None:
            return {}
        fields: dict[str, Any] = {"effects": self.effects.as_list()}
        if self.effects.dropped:
            fields["effects_dropped"] = self.effects.dropped
        return fields


_TRACER = tracing.tracer("plnt.runner")
_TRACEPARENT = web.RequestKey("plnt_traceparent", str)
"""The ``traceparent`` the answer carries (set before an SSE answer starts)."""


class Calls:
    """The requests being handled, and whether the runner is stopping: on SIGTERM it takes
    no new call and waits for these, a body still arriving included (runner contract,
    clause 7)."""

    def __init__(self) -> None:
        self.active = 0
        self.stopping = False
        self._idle = asyncio.Event()
        self._idle.set()

    def started(self) -> None:
        self.active += 1
        self._idle.clear()

    def finished(self) -> None:
        self.active -= 1
        if self.active == 0:
            self._idle.set()

    async def drained(self, timeout_s: float) -> bool:
        """True once no request is being handled; False when ``timeout_s`` passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout=timeout_s)
        except TimeoutError:
            return False
        return True


CALLS = web.AppKey("plnt_runner_calls", Calls)


@web.middleware
async def track_calls(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Count every request while it is handled; once stopping, answer 503 and close."""
    calls = request.app[CALLS]
    if calls.stopping:
        response = _error(503, "ShuttingDown", "the runner is shutting down")
        # the call never ran: the router may send it elsewhere (runner contract, clause 7)
        response.headers[DRAINING_HEADER] = "1"
        response.force_close()
        return response
    calls.started()
    try:
        return await handler(request)
    finally:
        calls.finished()


async def invoke(request: web.Request) -> web.StreamResponse:
    """``POST /invoke``. Continues the ``traceparent`` it is sent (runner contract): the
    answer's names the same trace and this runner's span, or a fresh span id while
    tracing is off."""
    if tracing.ENABLED:
        return await _traced_invoke(request)
    incoming = request.headers.get(tracing.TRACEPARENT)
    if incoming is not None:
        continued = tracing.continued_traceparent(incoming)
        if continued is not None:
            request[_TRACEPARENT] = continued
    response = await _invoke(request)
    if incoming is not None and not response.prepared and _TRACEPARENT in request:
        response.headers[tracing.TRACEPARENT] = request[_TRACEPARENT]
    return response


async def _traced_invoke(request: web.Request) -> web.StreamResponse:
    """``_invoke`` in the runner's server span, a child of the caller's ``traceparent``."""
    state = request.app[STATE]
    span = _TRACER.start_span(
        "POST /invoke",
        context=tracing.extract(request.headers),
        kind=SpanKind.SERVER,
        attributes={
            "http.request.method": "POST",
            "url.path": "/invoke",
            "plnt.workflow.name": state.name,
            "plnt.revision": state.settings.revision,
            "plnt.shadow": flag_set(request.headers.get(SHADOW_HEADER)),
        },
    )
    token = tracing.activate(span)  # by hand: cheaper than start_as_current_span
    try:
        request[_TRACEPARENT] = tracing.traceparent(span)
        response = await _invoke(request)
        span.set_attribute("http.response.status_code", response.status)
        if response.status >= 500:
            span.set_status(StatusCode.ERROR)
        if not response.prepared:
            response.headers[tracing.TRACEPARENT] = request[_TRACEPARENT]
        return response
    finally:
        tracing.deactivate(token)
        span.end()


async def _invoke(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    executor = state.executor
    if executor is None:
        return _error(503, "NotReady", "the runner is still starting")
    limit = state.settings.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        state.record(status="invalid", seconds=None)
        return _error(413, "BodyTooLarge", f"body is over the {limit}-byte limit")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        state.record(status="invalid", seconds=None)
        return _error(413, "BodyTooLarge", f"body is over the {limit}-byte limit")
    body, problem = _decode(raw)
    if body is None:
        state.record(status="invalid", seconds=None)
        return _error(422, "BadRequest", problem)
    mismatch = executor.input_problem(body)
    if mismatch is not None:  # before any step runs: a bad body costs no LLM call
        state.record(status="invalid", seconds=None)
        return _error(422, "InputInvalid", mismatch)
    mode = CallMode(request)
    started = time.perf_counter()
    try:
        async with state.admission.slot():
            if "text/event-stream" in request.headers.get("Accept", ""):
                return await _invoke_sse(request, state, executor, body, started, mode)
            return await _invoke_json(state, executor, body, started, mode)
    except Saturated:
        _record(state, mode, status="rejected", seconds=None)
        response = _error(
            429,
            "Saturated",
            f"runner saturated: {state.admission.in_flight} in flight and "
            f"{state.admission.waiting} waiting; retry after {RETRY_AFTER_S}s",
        )
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
        return response


async def _invoke_json(
    state: RunnerState,
    executor: Executor,
    body: dict[str, Any],
    started: float,
    mode: CallMode,
) -> web.Response:
    try:
        invocation = await executor.run(body, shadow=mode.shadow, effects=mode.effects)
    except StepFailed as exc:
        _record(state, mode, status="error", seconds=time.perf_counter() - started)
        log.warning("invocation_failed", step=exc.step, tool=exc.tool, cause=exc.cause)
        response = _error(500, exc.reason, str(exc), step=exc.step)
        response.headers.update(mode.headers())  # the calls made before the failure
        return response
    _record(state, mode, status="ok", seconds=time.perf_counter() - started)
    usage = invocation_usage(invocation)
    cost = state.record_spend(usage)
    return web.json_response(
        _result(state, executor, invocation),
        headers={
            TOKENS_HEADER: f"{usage.prompt_tokens},{usage.completion_tokens}",
            COST_HEADER: repr(cost),
            **mode.headers(),
        },
    )


async def _invoke_sse(
    request: web.Request,
    state: RunnerState,
    executor: Executor,
    body: dict[str, Any],
    started: float,
    mode: CallMode,
) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",  # tell proxies such as nginx not to buffer events
        }
    )
    if _TRACEPARENT in request:
        response.headers[tracing.TRACEPARENT] = request[_TRACEPARENT]
    await response.prepare(request)
    # The executor calls back synchronously; a queue lets this task write at its own pace.
    events: asyncio.Queue[Event | None] = asyncio.Queue()
    run = asyncio.create_task(
        executor.run(body, on_event=events.put_nowait, shadow=mode.shadow, effects=mode.effects)
    )
    run.add_done_callback(lambda _: events.put_nowait(None))
    try:
        while (event := await events.get()) is not None:
            if isinstance(event, StepFinished):
                await response.write(_sse("step", step_event(event)))
            else:
                await response.write(_sse("token", token_event(event, reply=executor.reply)))
        try:
            invocation = run.result()
        except StepFailed as exc:
            _record(state, mode, status="error", seconds=time.perf_counter() - started)
            log.warning("invocation_failed", step=exc.step, tool=exc.tool, cause=exc.cause)
            failure = error_body(status=500, reason=exc.reason, message=str(exc), step=exc.step)
            await response.write(_sse("error", {**failure, **mode.event_fields()}))
        else:
            _record(state, mode, status="ok", seconds=time.perf_counter() - started)
            # The headers left before the tokens were known: counted here, not by the router.
            state.record_spend(invocation_usage(invocation))
            result = _result(state, executor, invocation)
            await response.write(_sse("result", {**result, **mode.event_fields()}))
        await response.write_eof()
    except ConnectionResetError:
        _record(state, mode, status="disconnected", seconds=time.perf_counter() - started)
        log.info("sse_client_disconnected")
    finally:
        if not run.done():
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
    return response


async def healthz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.executor is None:
        return web.json_response({"status": "starting"}, status=503)
    return web.json_response(
        {
            "status": "ok",
            "workflow": state.name,
            "version": state.workflow.metadata.version,
            "digest": state.digest,
            "revision": state.settings.revision,
            "provider": state.provider,
            "in_flight": state.admission.in_flight,
            "waiting": state.admission.waiting,
            "cache": state.cache.stats() if state.cache is not None else None,
        }
    )


async def metrics(request: web.Request) -> web.Response:
    gpu = request.app[STATE].gpu
    if gpu is not None:
        gpu.sample()  # sampled on scrape: as fresh as the scraper wants, no background task
    if openmetrics.CONTENT_TYPE_LATEST.split(";")[0] in request.headers.get("Accept", ""):
        # OpenMetrics carries the exemplars: the trace ids of sampled invocations.
        return web.Response(
            body=openmetrics.generate_latest(REGISTRY),  # type: ignore[no-untyped-call]
            headers={"Content-Type": openmetrics.CONTENT_TYPE_LATEST},
        )
    return web.Response(
        body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


async def add_revision_header(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare`` hook: every answer names the revision that gave it."""
    response.headers[REVISION_HEADER] = request.app[STATE].settings.revision


def _decode(raw: bytes) -> tuple[dict[str, Any] | None, str]:
    """The body as a JSON object, or None and what is wrong with it."""
    if not raw.strip():
        return None, "body is empty; send a JSON object"
    try:
        value = json.loads(raw.decode("utf-8-sig"))  # JSON on the wire is UTF-8 (RFC 8259)
    except UnicodeDecodeError:
        return None, "body is not UTF-8 JSON"
    except RecursionError:  # json recurses per nesting level
        return None, "body nests arrays and objects too deeply"
    except ValueError as exc:
        return None, f"body is not valid JSON: {exc}"
    if not isinstance(value, dict):
        return None, f"body must be a JSON object, got {type(value).__name__}"
    return value, ""


def _record(state: RunnerState, mode: CallMode, *, status: str, seconds: float | None) -> None:
    """``state.record``, and a shadow call counted apart too."""
    state.record(status=status, seconds=seconds)
    if mode.shadow:
        SHADOW_CALLS.labels(state.name, state.settings.revision, status).inc()


def _result(state: RunnerState, executor: Executor, invocation: Invocation) -> dict[str, Any]:
    return invocation_body(
        invocation=invocation,
        sinks=executor.sinks,
        reply=executor.reply,
        workflow=state.name,
        version=state.workflow.metadata.version,
        revision=state.settings.revision,
        provider=state.provider,
    )


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def _error(status: int, reason: str, message: str, *, step: str | None = None) -> web.Response:
    body = error_body(status=status, reason=reason, message=message, step=step)
    return web.json_response(body, status=status)
