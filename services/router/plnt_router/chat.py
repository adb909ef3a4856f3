"""OpenAI-compatible endpoints: ``POST /v1/chat/completions`` and ``GET /v1/models``.

A chat completion is one workflow call: the model names the workflow (``name`` in the
default namespace, or ``namespace/name``), the last user message is the input, and the
workflow's reply text (the runner's ``reply``) becomes the assistant message, with the
tokens its steps spent as ``usage``. With ``stream: true`` the runner is called for SSE and
its reply tokens are relayed as ``chat.completion.chunk`` events the moment they arrive,
ending in ``data: [DONE]``. Reshaping lives in ``openai_compat``.
"""

import json
import time
import uuid

from aiohttp import hdrs, web

from plnt_common import tracing
from plnt_router.adapters.upstream import UpstreamReply
from plnt_router.chat_stream import ChatStream
from plnt_router.errors import UpstreamTimeout, UpstreamUnavailable
from plnt_router.logic import DEFAULT_NAMESPACE
from plnt_router.openai_compat import (
    ChatRequestInvalid,
    ChunkMaker,
    completion,
    model_id,
    model_list,
    reply_text,
    run_usage,
    split_model,
    workflow_input,
)
from plnt_router.pipeline import CLIENT_CLOSED, Call, CallPipeline
from plnt_router.responses import (
    REVISION_HEADER,
    SSE_CONTENT_TYPE,
    json_response,
    reject,
    sse_event,
)
from plnt_router.shadow_mirror import AnswerBuffer
from plnt_router.sse import SseDecoder
from plnt_router.table import RouteTable

DONE = sse_event("[DONE]")


class ChatHandlers:
    """Chat completions and the model list over one call pipeline and route table."""

    def __init__(self, *, pipeline: CallPipeline, table: RouteTable, max_json_depth: int) -> None:
        self._pipeline = pipeline
        self._table = table
        self._max_depth = max_json_depth

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/chat/completions``: the model names the workflow."""
        call = Call(namespace=DEFAULT_NAMESPACE, name="")
        if tracing.ENABLED:
            return await self._pipeline.traced(request, call, lambda: self._chat(request, call))
        return await self._pipeline.measured(request, call, self._chat(request, call))

    async def models(self, request: web.Request) -> web.Response:
        """``GET /v1/models``: workflows with a ready route the caller may call."""
        ids = [
            model_id(namespace=route.entry.namespace, name=route.entry.name)
            for route in self._table.routes()
            if route.entry.has_ready_target()
            and self._pipeline.authorized(request, route.entry.namespace)
        ]
        return json_response(model_list(ids))

    async def _chat(self, request: web.Request, call: Call) -> web.StreamResponse:
        steps = self._pipeline
        _, doc = await steps.read_object(request)
        model = doc.get("model")
        if not isinstance(model, str) or not model:
            raise reject(422, "invalid_request", "'model' must be the name of a workflow")
        call.namespace, call.name = split_model(model)
        try:
            body = json.dumps(
                workflow_input(doc.get("messages"), max_depth=self._max_depth)
            ).encode()
        except ChatRequestInvalid as exc:
            raise reject(422, "invalid_request", str(exc)) from None
        stream = doc.get("stream") is True
        options = doc.get("stream_options")
        with_usage = isinstance(options, dict) and options.get("include_usage") is True
        steps.check_key(request, call.namespace)
        steps.route(call)
        headers = steps.upstream_headers(request, stream=stream)
        chunks = ChunkMaker(
            completion_id=f"chatcmpl-{uuid.uuid4().hex}", created=int(time.time()), model=model
        )
        async with steps.slot():
            reply = await steps.open(call, body=body, headers=headers, stream=stream)
            try:
                if stream and reply.is_event_stream and 200 <= reply.status < 300:
                    return await self._relay(request, call, reply, chunks, with_usage=with_usage)
                raw = await steps.read_reply(call, reply)
            finally:
                reply.close()
        steps.mirror(call, reply, raw)  # queued, never awaited: the answer goes now
        revision = {REVISION_HEADER: call.revision}
        if not 200 <= reply.status < 300:
            # The runner's own error, unchanged: it knows best what went wrong.
            return web.Response(
                status=reply.status,
                body=raw,
                headers={hdrs.CONTENT_TYPE: reply.content_type, **revision},
            )
        try:
            result = json.loads(raw)
        except ValueError:
            raise reject(
                502,
                "upstream_invalid",
                f"workflow '{call.name}' revision {call.revision} answered with a body "
                "that is not JSON",
                headers=revision,
            ) from None
        if stream:  # a runner that answered a stream request with JSON: one content chunk
            events = [chunks.role(), chunks.content(reply_text(result)), chunks.stop()]
            usage = run_usage(result)
            if with_usage and usage is not None:
                events.append(chunks.usage(usage))
            response = await _open_stream(request, call)
            await _write_all(response, call, [sse_event(json.dumps(e)) for e in events] + [DONE])
            return response
        answer = completion(
            completion_id=chunks.completion_id,
            created=chunks.created,
            model=model,
            content=reply_text(result),
            usage=run_usage(result),
        )
        return json_response(answer, headers=revision)

    async def _relay(
        self,
        request: web.Request,
        call: Call,
        reply: UpstreamReply,
        chunks: ChunkMaker,
        *,
        with_usage: bool,
    ) -> web.StreamResponse:
        """Turn the runner's SSE into chat chunks: each reply token as it arrives, then stop."""
        response = await _open_stream(request, call)
        relay = ChatStream(chunks, with_usage=with_usage)
        kept = AnswerBuffer() if call.mirror is not None else None
        failed: int | None = None
        try:
            await response.write(sse_event(json.dumps(chunks.role())))
            decoder = SseDecoder()
            tail = b""
            try:
                async for piece in reply.chunks():
                    if kept is not None:
                        kept.add(piece)
                    out = b"".join(relay.on_event(e, d) for e, d in decoder.feed(piece))
                    if out:
                        await response.write(out)
            except (UpstreamTimeout, UpstreamUnavailable) as exc:
                failure = self._pipeline.upstream_failure(call, exc).response
                failed = failure.status
                tail = relay.fail(failure.status, str(exc))
            await response.write(tail + relay.ending() + DONE)
            if relay.status is not None:
                call.status = relay.status
            await response.write_eof()
        except ConnectionResetError:
            call.status = CLIENT_CLOSED
            return response
        if kept is not None:  # the caller has the whole answer: now the mirror may go
            self._pipeline.mirror(call, reply, kept.whole(), status=failed)
        return response


async def _open_stream(request: web.Request, call: Call) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={
            hdrs.CONTENT_TYPE: SSE_CONTENT_TYPE,
            hdrs.CACHE_CONTROL: "no-cache",
            REVISION_HEADER: call.revision,
        }
    )
    await response.prepare(request)
    return response


async def _write_all(response: web.StreamResponse, call: Call, events: list[bytes]) -> None:
    try:
        for event in events:
            await response.write(event)
        await response.write_eof()
    except ConnectionResetError:
        call.status = CLIENT_CLOSED
