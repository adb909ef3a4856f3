"""The steps every proxied call goes through, shared by the invoke and OpenAI endpoints.

Per call the work is: optional API key check, one dict lookup in the route table, JSON
parsing of the body (validation only: the original bytes are forwarded), admission by the
in-flight limiter, one POST on the pooled runner client, and relaying the answer. No KV
read, no pydantic model and no info-level log line happen per call. A step that refuses
the call raises ``Rejection``; ``measured`` turns it into the answer and records metrics.
Which revision serves a call is ``logic``'s decision; talking to runners is
``adapters.upstream``'s job; the endpoints themselves live in ``handlers`` and ``chat``.
While a route carries ``shadow``, ``open`` also decides whether the call is mirrored and
``mirror`` hands its decided answer to ``shadow_mirror``'s queue without waiting.
"""

import asyncio
import hmac
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import hdrs, web
from opentelemetry.trace import SpanKind, StatusCode

from plnt_common import tracing
from plnt_common.admission import InFlightLimiter, Saturated
from plnt_common.logs import get_logger
from plnt_common.names import MAX_RUN_NAME
from plnt_common.routes import BackendEndpoint, RouteTarget, route_key
from plnt_common.shadow_pairs import EFFECTS_REQUEST_HEADER, EFFECTS_RESPONSE_HEADER
from plnt_router.adapters.upstream import RunnerClient, UpstreamReply
from plnt_router.endpoint_health import EndpointHealth
from plnt_router.errors import UpstreamTimeout, UpstreamUnavailable
from plnt_router.json_body import JsonRejected, load_object
from plnt_router.logic import fallback_target
from plnt_router.metrics import InvocationMetrics
from plnt_router.responses import (
    REVISION_HEADER,
    SSE_CONTENT_TYPE,
    Rejection,
    answer_and_close,
    json_error,
    reject,
    sse_error,
)
from plnt_router.settings import RouterSettings
from plnt_router.shadow_answer import COST_HEADER
from plnt_router.shadow_mirror import (
    MAX_KEPT_ANSWER_BYTES,
    AnswerBuffer,
    LiveAnswer,
    MirrorOrder,
    ShadowMirror,
)
from plnt_router.table import Route, RouteTable

log = get_logger(__name__)
_TRACER = tracing.tracer("plnt.router")

INVOKE_PATH = "/invoke"
MAX_NAMESPACE = 63
"""A Kubernetes namespace is a DNS-1123 label: at most 63 characters."""
# Correlation headers worth carrying to the runner; everything else (notably the router's
# Authorization) stays at the router.
FORWARDED_HEADERS = ("x-request-id", "traceparent", "tracestate")
TOKENS_HEADER = "x-plnt-tokens"
"""What the runner's answer says the call spent: ``<prompt>,<completion>`` tokens (and
``COST_HEADER``, USD)."""
DRAINING_HEADER = "x-plnt-draining"
"""On a stopping runner's 503: the call was not run, so it may go to another runner."""
CLIENT_CLOSED = 499
"""Status recorded for a call whose client went away before its answer (nginx's code)."""
UNHEALTHY_STATUSES = frozenset({502, 503, 504})
"""Statuses that count against a backend endpoint's health: no runner answered the call
(a 500 is the workflow's own failure, from a runner that works)."""


@dataclass(slots=True)
class Call:
    """What the metrics need to know about one call, filled in as handling proceeds."""

    namespace: str
    name: str
    known: bool = False
    revision: str = ""
    # Overrides the response status in metrics when a stream failed after its status line.
    status: int | None = None
    # The router span's ``traceparent`` while tracing is on: the answer carries it.
    traceparent: str = ""
    # Set while the call is mirrored (shadow traffic): handed to the mirror once answered.
    mirror: MirrorOrder | None = None

    @property
    def key(self) -> str:
        return route_key(self.namespace, self.name)

    @property
    def workflow(self) -> str:
        return f"{self.namespace}/{self.name}" if self.known else ""


def _quoted(name: str, limit: int) -> str:
    """``'name'`` for a message, cut when longer than any real name (a URL can hold 8 KB)."""
    if len(name) <= limit:
        return f"'{name}'"
    return f"'{name[:limit]}...' ({len(name)} characters, more than a name may have)"


class _Slot:
    """The context manager ``CallPipeline.slot`` returns: a plain class rather than
    ``contextlib.asynccontextmanager``, whose generator machinery showed in profiles."""

    __slots__ = ("_pipeline",)

    def __init__(self, pipeline: "CallPipeline") -> None:
        self._pipeline = pipeline

    async def __aenter__(self) -> None:
        await self._pipeline._acquire_slot()

    async def __aexit__(self, *exc_info: object) -> None:
        self._pipeline._release_slot()


class CallPipeline:
    """The call steps bound to one route table, runner pool, limiter and metrics."""

    def __init__(
        self,
        *,
        settings: RouterSettings,
        table: RouteTable,
        runners: RunnerClient,
        limiter: InFlightLimiter,
        metrics: InvocationMetrics,
        shadow: ShadowMirror | None = None,
        health: EndpointHealth | None = None,
    ) -> None:
        self._table = table
        self._health = health or EndpointHealth(
            down_after=settings.endpoint_down_after, ramp_s=settings.endpoint_ramp_s
        )
        self._connect_timeout_s = settings.connect_timeout_s
        self._retry_unanswered = settings.retry_unanswered
        self._shadow = shadow
        self._runners = runners
        self._limiter = limiter
        self._metrics = metrics
        self._max_body = settings.max_body_bytes
        self._max_depth = settings.max_json_depth
        self._body_timeout_s = settings.body_timeout_s
        self._timeout_s = settings.upstream_timeout_s
        self._retry_after: dict[str, str] = {hdrs.RETRY_AFTER: str(settings.retry_after_s)}
        self._api_keys = {
            namespace: key.get_secret_value().encode()
            for namespace, key in (settings.api_keys or {}).items()
        }
        self._open = settings.auth == "none"

    async def measured(
        self, request: web.Request, call: Call, work: Awaitable[web.StreamResponse]
    ) -> web.StreamResponse:
        """Await ``work``, turn a ``Rejection`` into its response, record the metrics.

        A client that went away is neither an error nor a 500: its call is cancelled,
        recorded as 499 and logged at debug.
        """
        started = time.perf_counter()
        status = 500
        try:
            response = await work
            status = call.status or response.status
            return response
        except Rejection as rejection:
            status = rejection.response.status
            if rejection.close:
                return await answer_and_close(request, rejection.response)
            return rejection.response
        except asyncio.CancelledError:
            # aiohttp cancels a handler whose client left (handler_cancellation): that
            # releases the slot and the runner connection at once. Otherwise the router
            # is stopping and its grace ran out.
            status = CLIENT_CLOSED if request.transport is None else 503
            log.debug("router.call_cancelled", status=status, workflow=call.workflow)
            raise
        except Exception:
            # A bug, not a runner failure: the client still gets the JSON error shape.
            log.exception("router.internal_error", workflow=call.workflow, revision=call.revision)
            return json_error(500, "internal_error", "the router failed to handle this call")
        finally:
            self._metrics.observe(
                workflow=call.workflow,
                revision=call.revision,
                status=status,
                seconds=time.perf_counter() - started,
                exemplar=tracing.exemplar_of(call.traceparent) if call.traceparent else None,
            )

    async def traced(
        self,
        request: web.Request,
        call: Call,
        work: Callable[[], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        """``measured(work())`` inside the router's server span (tracing on only): a child of
        the caller's ``traceparent`` when it sent one. ``open`` hands the span's
        ``traceparent`` to the runner; the answer carries it too."""
        route = request.match_info.route.resource
        # Each saving below is measured against the bench's 0.1 ms budget: no extraction when
        # the caller sent no traceparent, one set_attributes, and the span is not made current
        # (nothing under it reads the current span: the runner gets ``call.traceparent`` and
        # the exemplar is read from it).
        span = _TRACER.start_span(
            f"{request.method} {route.canonical if route is not None else request.path}",
            context=tracing.extract(request.headers)
            if tracing.TRACEPARENT in request.headers
            else None,
            kind=SpanKind.SERVER,
            attributes={"http.request.method": request.method, "url.path": request.path},
        )
        status: int | None = None  # stays None when the call is cancelled
        try:
            call.traceparent = tracing.traceparent(span)
            response = await self.measured(request, call, work())
            status = call.status or response.status
            if not response.prepared:
                response.headers[tracing.TRACEPARENT] = call.traceparent
            return response
        finally:
            attributes: dict[str, str | int] = {}
            if status is not None:
                attributes["http.response.status_code"] = status
            if call.name:
                attributes["plnt.workflow.namespace"] = call.namespace
                attributes["plnt.workflow.name"] = call.name
            if call.revision:
                attributes["plnt.revision"] = call.revision
            span.set_attributes(attributes)
            if status is not None and status >= 500:
                span.set_status(StatusCode.ERROR)
            span.end()

    def authorized(self, request: web.Request, namespace: str) -> bool:
        """True when the request carries ``namespace``'s bearer key, or the namespace has
        no key and the router is open (auth none)."""
        expected = self._api_keys.get(namespace)
        if expected is None:
            return self._open
        scheme, _, token = request.headers.get(hdrs.AUTHORIZATION, "").partition(" ")
        # compare_digest: the comparison time must not reveal how much of a guess matched.
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected)

    def check_key(self, request: web.Request, namespace: str) -> None:
        """Raises 401 unless ``authorized``."""
        if not self.authorized(request, namespace):
            raise reject(
                401,
                "unauthorized",
                f"namespace '{namespace}' needs 'Authorization: Bearer <key>' with a valid key",
                headers={str(hdrs.WWW_AUTHENTICATE): "Bearer"},
            )

    def route(self, call: Call) -> Route:
        """The call's route. Raises 404 for an unknown workflow, 503 when nothing is ready."""
        route = self._table.get(call.key)
        if route is None:
            raise reject(
                404,
                "workflow_not_found",
                f"workflow {_quoted(call.name, MAX_RUN_NAME)} is not deployed in namespace "
                f"{_quoted(call.namespace, MAX_NAMESPACE)}",
            )
        call.known = True
        if not route.entry.has_ready_target():
            why = (
                "is routed, but no routed runner is serving (the backend is restarting it)"
                if route.runners_down
                else "has no ready revision yet"
            )
            raise reject(
                503,
                "workflow_not_ready",
                f"workflow '{call.name}' in namespace '{call.namespace}' {why}",
                headers=self._retry_after,
            )
        return route

    async def read_object(self, request: web.Request) -> tuple[bytes, dict[str, Any]]:
        """The body bytes and their parse. Raises 413 when too large, 422 unless a JSON object."""
        length = request.content_length
        if length is not None and length > self._max_body:
            raise self._too_large()
        try:
            if request.content.is_eof():  # the usual case: the body came with the headers
                raw = await request.read()
            else:
                async with asyncio.timeout(self._body_timeout_s):
                    raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            # A chunked body with no Content-Length only shows its size while being read.
            raise self._too_large() from None
        except TimeoutError:
            raise reject(
                408,
                "body_timeout",
                f"request body not received within {self._body_timeout_s:g}s",
                close=True,
            ) from None
        except web.RequestPayloadError as exc:  # e.g. broken chunked framing
            raise reject(400, "bad_body", f"request body is malformed: {exc}", close=True) from None
        try:
            doc = load_object(raw, max_depth=self._max_depth)
        except JsonRejected as exc:
            raise reject(422, "invalid_json", f"request body {exc}") from None
        return raw, doc

    def _too_large(self) -> Rejection:
        return reject(413, "body_too_large", f"request body is larger than {self._max_body} bytes")

    @staticmethod
    def upstream_headers(request: web.Request, *, stream: bool) -> dict[str, str]:
        """Headers for the runner: JSON body, the wanted answer type, correlation ids."""
        headers: dict[str, str] = {
            hdrs.CONTENT_TYPE: "application/json",
            hdrs.ACCEPT: SSE_CONTENT_TYPE if stream else "application/json",
        }
        for name in FORWARDED_HEADERS:
            value = request.headers.get(name)
            if value is not None:
                headers[name] = value
        return headers

    def slot(self) -> "_Slot":
        """``async with pipeline.slot():`` holds an in-flight slot for the block.

        Raises 429 on entry when the queue is full.
        """
        return _Slot(self)

    async def _acquire_slot(self) -> None:
        try:
            await self._limiter.acquire()
        except Saturated:
            raise reject(
                429,
                "over_limit",
                f"the router is at its limit ({self._limiter.in_flight} calls in flight, "
                f"{self._limiter.waiting} queued); retry later",
                headers=self._retry_after,
            ) from None

    def _release_slot(self) -> None:
        self._limiter.release()

    async def open(
        self, call: Call, *, body: bytes, headers: dict[str, str], stream: bool
    ) -> UpstreamReply:
        """Send the call to the runner the route picks now; once more elsewhere if refused.

        The route is looked up again because it may have changed while the call queued.
        Raises 404/503 like ``route``, 502 or 504 when the runner fails.
        """
        if call.traceparent:  # the runner's span is a child of the router's
            headers[tracing.TRACEPARENT] = call.traceparent
        route = self.route(call)
        target = route.pick()
        if target is None:  # route() saw a ready target; this keeps the type checker honest
            raise reject(503, "workflow_not_ready", f"workflow '{call.name}' has no ready revision")
        if route.entry.shadow is not None and self._shadow is not None:
            self._order_mirror(call, route, target, body=body, headers=headers)
        if target.endpoints:
            return await self._open_spread(
                call, route, target, body=body, headers=headers, stream=stream
            )
        try:
            try:
                reply = await self._post(call, target, body=body, headers=headers, stream=stream)
                if reply.status != 503 or reply.header(DRAINING_HEADER) != "1":
                    return reply
                # The runner is stopping and did not run the call: the route has usually
                # moved on already (a rollback, a retirement), so it goes where that points.
                fallback = self._instead_of_draining(call, target)
                if fallback is None:
                    return reply  # nowhere else: the runner's own 503
                reply.close()
                log.info("router.drained_elsewhere", workflow=call.workflow, to=fallback.revision)
            except UpstreamUnavailable as exc:
                # Refused before anything was sent: another runner cannot run it twice.
                fallback = fallback_target(entry=route.entry, failed=target)
                if not exc.before_send or fallback is None:
                    raise
                log.warning(
                    "router.fallback",
                    workflow=call.workflow,
                    failed=target.revision,
                    to=fallback.revision,
                    error=str(exc),
                )
            return await self._post(call, fallback, body=body, headers=headers, stream=stream)
        except (UpstreamTimeout, UpstreamUnavailable) as exc:
            raise self.upstream_failure(call, exc) from None

    def _order_mirror(
        self,
        call: Call,
        route: Route,
        target: RouteTarget,
        *,
        body: bytes,
        headers: dict[str, str],
    ) -> None:
        """Decide now whether this call is mirrored: the stable must then be asked for
        its side-effect calls, before the call leaves."""
        assert self._shadow is not None
        order = self._shadow.order(
            route, target, namespace=call.namespace, name=call.name, body=body
        )
        if order is not None:
            headers[EFFECTS_REQUEST_HEADER] = "1"
            order.started = time.perf_counter()
        call.mirror = order

    def mirror(
        self, call: Call, reply: UpstreamReply, raw: bytes | None, *, status: int | None = None
    ) -> None:
        """Hand a mirrored call's answer (decided, the caller's) to the shadow queue; never
        waits. ``raw`` is the whole body (None when not kept), ``status`` overrides the
        reply's when a stream failed after its status line."""
        order, call.mirror = call.mirror, None
        if order is None or self._shadow is None or call.revision != order.stable.revision:
            return  # not mirrored, or a fallback runner answered instead of the stable
        self._shadow.submit(
            order,
            LiveAnswer(
                revision=call.revision,
                status=status or reply.status,
                # Held in the queue until a worker takes it: an answer too large to keep
                # is paired without its body rather than held whole.
                raw=raw if raw is None or len(raw) <= MAX_KEPT_ANSWER_BYTES else None,
                streamed=reply.is_event_stream,
                cost=reply.header(COST_HEADER),
                effects=reply.header(EFFECTS_RESPONSE_HEADER),
                latency_ms=(time.perf_counter() - order.started) * 1000,
            ),
        )

    async def _open_spread(
        self,
        call: Call,
        route: Route,
        target: RouteTarget,
        *,
        body: bytes,
        headers: dict[str, str],
        stream: bool,
    ) -> UpstreamReply:
        """Send a call to one backend endpoint of a spread revision; once more elsewhere
        when no runner ran it (see ``_resendable``): another endpoint of the same revision,
        else the route's other target."""
        first = self._choose_endpoint(route, target)
        if first is None:  # the table keeps only targets with a serving endpoint
            raise reject(503, "workflow_not_ready", f"workflow '{call.name}' has no ready backend")
        try:
            failure: UpstreamTimeout | UpstreamUnavailable | None = None
            try:
                reply = await self._post_endpoint(
                    call, target, first, body=body, headers=headers, stream=stream
                )
                if reply.status != 503:  # a runner's 503: it did not run the call
                    return reply
            except (UpstreamTimeout, UpstreamUnavailable) as exc:
                if not self._resendable(exc):
                    raise
                failure = exc
            second_target, second = target, self._choose_endpoint(route, target, besides=first.url)
            if second is None:
                fallback = self._elsewhere(call, target)
                if fallback is None:  # nowhere else: the runner's own 503, or its failure
                    if failure is not None:
                        raise failure
                    return reply
                second_target = fallback
                if fallback.endpoints:
                    second = self._choose_endpoint(route, fallback)
            if failure is None:
                reply.close()
            log.warning(
                "router.sent_elsewhere",
                workflow=call.workflow,
                failed=first.url,
                to=second.url if second is not None else second_target.url,
                revision=second_target.revision,
                error=str(failure) if failure is not None else "503",
            )
            if second is None:
                return await self._post(
                    call, second_target, body=body, headers=headers, stream=stream
                )
            return await self._post_endpoint(
                call, second_target, second, body=body, headers=headers, stream=stream
            )
        except (UpstreamTimeout, UpstreamUnavailable) as exc:
            raise self.upstream_failure(call, exc) from None

    def _resendable(self, exc: UpstreamTimeout | UpstreamUnavailable) -> bool:
        """Whether no runner ran the call, so another may: it was never sent (connection
        refused or too slow), or, when allowed, the connection broke before any answer."""
        if isinstance(exc, UpstreamTimeout):
            return exc.before_send
        return exc.before_send or (exc.before_answer and self._retry_unanswered)

    def _elsewhere(self, call: Call, failed: RouteTarget) -> RouteTarget | None:
        """The route's other ready target, for a call no endpoint of ``failed`` ran."""
        route = self._table.get(call.key)
        if route is None:
            return None
        return fallback_target(entry=route.entry, failed=failed)

    def _choose_endpoint(
        self, route: Route, target: RouteTarget, *, besides: str = ""
    ) -> BackendEndpoint | None:
        """The serving endpoint of ``target`` that takes the next call, weighted by health:
        out while down, ramping after a return. When every one is down they are all tried
        rather than none (the probe may lag a backend that is back). With ``besides`` (a
        re-send): the healthiest endpoint other than that url, the split left as it was;
        None when there is none."""
        endpoints = route.serving_endpoints.get(target.revision)
        if endpoints is None:  # not the route's own target (a fallback's other revision)
            endpoints = tuple(target.serving_endpoints())
        if besides:
            others = [e for e in endpoints if e.url != besides]
            return max(others, key=lambda e: self._health.weight(e.url), default=None)
        weighted = [(e.url, w) for e in endpoints if (w := self._health.weight(e.url)) > 0]
        if not weighted:
            weighted = [(e.url, 1.0) for e in endpoints]
        if not weighted:
            return None
        url = weighted[route.endpoint_split(target.revision).pick(weighted)][0]
        return next(e for e in endpoints if e.url == url)

    async def _post_endpoint(
        self,
        call: Call,
        target: RouteTarget,
        endpoint: BackendEndpoint,
        *,
        body: bytes,
        headers: dict[str, str],
        stream: bool,
    ) -> UpstreamReply:
        """``_post`` to one backend endpoint, its outcome counted in the endpoint's health."""
        url = endpoint.url
        try:
            reply = await self._post(
                call,
                target,
                body=body,
                headers=headers,
                stream=stream,
                url=url,
                connect_timeout_s=self._connect_timeout_s,
            )
        except UpstreamUnavailable as exc:
            if exc.before_answer:
                self._health.failed(url)
            raise
        except UpstreamTimeout:
            # sent or not, the runner did not answer in time: new calls go elsewhere
            self._health.failed(url)
            raise
        if reply.status in UNHEALTHY_STATUSES:
            self._health.failed(url)
        else:
            self._health.answered(url)
        return reply

    def _instead_of_draining(self, call: Call, draining: RouteTarget) -> RouteTarget | None:
        """Where a call refused by a stopping runner goes: the target the route picks now,
        or its other target; None when both are that runner."""
        route = self._table.get(call.key)
        if route is None:
            return None
        target = route.pick()
        if target is not None and target.url != draining.url:
            return target
        return fallback_target(entry=route.entry, failed=draining)

    async def _post(
        self,
        call: Call,
        target: RouteTarget,
        *,
        body: bytes,
        headers: dict[str, str],
        stream: bool,
        url: str = "",
        connect_timeout_s: float | None = None,
    ) -> UpstreamReply:
        call.revision = target.revision
        reply = await self._runners.post(
            url=(url or target.url).rstrip("/") + INVOKE_PATH,
            body=body,
            headers=headers,
            stream=stream,
            connect_timeout_s=connect_timeout_s,
        )
        tokens = reply.header(TOKENS_HEADER)
        if tokens is not None:
            self._metrics.spend(
                workflow=call.workflow,
                revision=call.revision,
                tokens=tokens,
                cost=reply.header(COST_HEADER),
            )
        return reply

    async def read_reply(self, call: Call, reply: UpstreamReply) -> bytes:
        """The runner's whole body. Raises 502 or 504 when the runner fails while sending it."""
        try:
            return await reply.read()
        except (UpstreamTimeout, UpstreamUnavailable) as exc:
            raise self.upstream_failure(call, exc) from None

    def upstream_failure(self, call: Call, exc: UpstreamTimeout | UpstreamUnavailable) -> Rejection:
        log.warning(
            "router.upstream_failed", workflow=call.workflow, revision=call.revision, error=str(exc)
        )
        headers = {REVISION_HEADER: call.revision}
        if isinstance(exc, UpstreamTimeout):
            return reject(
                504,
                "upstream_timeout",
                f"workflow '{call.name}' revision {call.revision} did not answer "
                f"within {self._timeout_s:g}s",
                headers=headers,
            )
        return reject(
            502,
            "upstream_unavailable",
            f"workflow '{call.name}' revision {call.revision} is unreachable: {exc}",
            headers=headers,
        )

    async def relay(
        self, request: web.Request, call: Call, reply: UpstreamReply
    ) -> web.StreamResponse:
        """Pass an SSE answer through chunk by chunk, each written as soon as it arrives."""
        response = web.StreamResponse(
            status=reply.status,
            headers={
                hdrs.CONTENT_TYPE: reply.content_type,
                hdrs.CACHE_CONTROL: "no-cache",
                REVISION_HEADER: call.revision,
            },
        )
        if call.traceparent:
            response.headers[tracing.TRACEPARENT] = call.traceparent
        await response.prepare(request)
        kept = AnswerBuffer() if call.mirror is not None else None
        try:
            try:
                async for chunk in reply.chunks():
                    await response.write(chunk)
                    if kept is not None:
                        kept.add(chunk)
            except (UpstreamTimeout, UpstreamUnavailable) as exc:
                # The status line is gone already: tell the client in-band, then end.
                failure = self.upstream_failure(call, exc).response
                call.status = failure.status
                code = "upstream_timeout" if failure.status == 504 else "upstream_unavailable"
                await response.write(sse_error(code, str(exc)))
            await response.write_eof()
        except ConnectionResetError:
            call.status = CLIENT_CLOSED
            return response
        if kept is not None:  # the caller has the whole answer: now the mirror may go
            self.mirror(call, reply, kept.whole(), status=call.status)
        return response
