"""OpenAI-compatible endpoints: ``POST /v1/chat/completions`` and ``GET /v1/models``.

A chat completion is one workflow call: the model names the workflow (``name`` in the
default namespace, or ``namespace/name``), the last user message is the input, and the
runner's answer becomes the assistant message, whole or as ``chat.completion.chunk``
events. The runner is always called for JSON; streaming here is the OpenAI framing of the
finished answer, not token streaming. Reshaping lives in ``openai_compat``.
"""

import json
import time
import uuid

from aiohttp import hdrs, web

from plnt_router.logic import DEFAULT_NAMESPACE
from plnt_router.openai_compat import (
    ChatRequestInvalid,
    completion,
    completion_chunks,
    model_id,
    model_list,
    reply_text,
    split_model,
    workflow_input,
)
from plnt_router.pipeline import Call, CallPipeline
from plnt_router.responses import (
    REVISION_HEADER,
    SSE_CONTENT_TYPE,
    json_response,
    reject,
    sse_event,
)
from plnt_router.table import RouteTable


class ChatHandlers:
    """Chat completions and the model list over one call pipeline and route table."""

    def __init__(self, *, pipeline: CallPipeline, table: RouteTable) -> None:
        self._pipeline = pipeline
        self._table = table

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/chat/completions``: the model names the workflow."""
        call = Call(namespace=DEFAULT_NAMESPACE, name="")
        return await self._pipeline.measured(call, self._chat(request, call))

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
            body = json.dumps(workflow_input(doc.get("messages"))).encode()
        except ChatRequestInvalid as exc:
            raise reject(422, "invalid_request", str(exc)) from None
        steps.check_key(request, call.namespace)
        steps.route(call)
        headers = steps.upstream_headers(request, stream=False)
        async with steps.slot():
            reply = await steps.open(call, body=body, headers=headers, stream=False)
            try:
                raw = await steps.read_reply(call, reply)
            finally:
                reply.close()
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
        completion_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        content = reply_text(result)
        if doc.get("stream") is True:
            chunks = completion_chunks(
                completion_id=completion_id, created=created, model=model, content=content
            )
            events = [sse_event(json.dumps(chunk)) for chunk in chunks]
            events.append(sse_event("[DONE]"))
            return await self._send_events(request, call, events, headers=revision)
        answer = completion(
            completion_id=completion_id,
            created=created,
            model=model,
            content=content,
            usage=result.get("usage") if isinstance(result, dict) else None,
        )
        return json_response(answer, headers=revision)

    @staticmethod
    async def _send_events(
        request: web.Request, call: Call, events: list[bytes], *, headers: dict[str, str]
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                hdrs.CONTENT_TYPE: SSE_CONTENT_TYPE,
                hdrs.CACHE_CONTROL: "no-cache",
                **headers,
            }
        )
        await response.prepare(request)
        try:
            for event in events:
                await response.write(event)
            await response.write_eof()
        except ConnectionResetError:
            call.status = 499  # the client went away; nginx's code for it
        return response
