"""The router's own HTTP endpoints: workflow invocation, health, readiness and metrics.

``invoke`` answers ``POST /workflows/{name}/invoke`` and its namespaced twin by running
the shared call steps of ``pipeline``; the OpenAI-compatible endpoints are in ``chat``.
Nothing here decides routing or talks to runners directly.
"""

from aiohttp import hdrs, web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics

from plnt_common import tracing
from plnt_router.logic import DEFAULT_NAMESPACE
from plnt_router.pipeline import Call, CallPipeline
from plnt_router.responses import REVISION_HEADER, SSE_CONTENT_TYPE, json_error, json_response
from plnt_router.table import RouteTable


class Handlers:
    """Invoke and operations endpoints over one call pipeline and route table."""

    def __init__(self, *, pipeline: CallPipeline, table: RouteTable) -> None:
        self._pipeline = pipeline
        self._table = table

    async def invoke(self, request: web.Request) -> web.StreamResponse:
        """``POST [/namespaces/{ns}]/workflows/{name}/invoke``: JSON, or SSE on request."""
        call = Call(
            namespace=request.match_info.get("ns", DEFAULT_NAMESPACE),
            name=request.match_info["name"],
        )
        if tracing.ENABLED:  # the only tracing cost of a call while tracing is off
            return await self._pipeline.traced(request, call, lambda: self._invoke(request, call))
        return await self._pipeline.measured(request, call, self._invoke(request, call))

    async def healthz(self, request: web.Request) -> web.Response:
        """200 whenever the process serves HTTP."""
        return json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        """200 once the route table holds every route that existed at start-up."""
        if self._table.loaded:
            return json_response({"status": "ready", "routes": len(self._table)})
        return json_error(503, "not_ready", "the route table has not been loaded from NATS yet")

    async def metrics(self, request: web.Request) -> web.Response:
        """Prometheus text exposition of the default registry; OpenMetrics, with the trace
        ids of sampled calls as exemplars, to a scraper that asks for it."""
        if openmetrics.CONTENT_TYPE_LATEST.split(";")[0] in request.headers.get(hdrs.ACCEPT, ""):
            return web.Response(
                body=openmetrics.generate_latest(REGISTRY),  # type: ignore[no-untyped-call]
                headers={hdrs.CONTENT_TYPE: openmetrics.CONTENT_TYPE_LATEST},
            )
        return web.Response(
            body=generate_latest(REGISTRY), headers={hdrs.CONTENT_TYPE: CONTENT_TYPE_LATEST}
        )

    async def _invoke(self, request: web.Request, call: Call) -> web.StreamResponse:
        steps = self._pipeline
        steps.check_key(request, call.namespace)
        steps.route(call)
        body, _ = await steps.read_object(request)
        stream = SSE_CONTENT_TYPE in request.headers.get(hdrs.ACCEPT, "")
        headers = steps.upstream_headers(request, stream=stream)
        async with steps.slot():
            reply = await steps.open(call, body=body, headers=headers, stream=stream)
            try:
                if stream and reply.is_event_stream:
                    return await steps.relay(request, call, reply)
                payload = await steps.read_reply(call, reply)
            finally:
                reply.close()
        steps.mirror(call, reply, payload)  # queued, never awaited: the answer goes now
        return web.Response(
            status=reply.status,
            body=payload,
            headers={hdrs.CONTENT_TYPE: reply.content_type, REVISION_HEADER: call.revision},
        )
