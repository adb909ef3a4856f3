"""A fake OpenAI-compatible LLM server: a real aiohttp server on a free loopback port.

It implements what plnt depends on from the chat completions API: ``POST
/v1/chat/completions`` (plain, and streamed as ``text/event-stream`` chunks, one per word,
with the usage chunk when ``stream_options.include_usage`` asks for it, ending in
``data: [DONE]``) and ``GET /v1/models``, with bearer auth, a fixed latency, a failure mode
and a request counter. It keeps every request (``received``: the messages, model,
temperature, max_tokens and response_format it was sent) so tests can assert on prompts.

What it answers: JSON matching the schema when the request asks for one
(``response_format`` of type ``json_schema``, or a schema in the system message as plnt's
runner words it when the backend has no structured outputs); otherwise ``reply``, a fixed
text, or an echo of the last user message by default. A ``reply`` function of the
messages answers every request instead.
``invalid_answers`` makes the next N schema requests answer JSON that does not match, to
exercise a client's repair request.

    async with FakeLLM(latency_s=0.05, api_key="sk-test") as llm:
        settings = RunnerSettings(workflow_file=..., llm_base_url=llm.base_url, ...)
"""

import asyncio
import json
import re
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web

from plnt_runner.offline import instance_of, schema_in_instructions

Replier = Callable[[Sequence[dict[str, Any]]], str]
_CHUNK = re.compile(r"\S+\s*")


@dataclass(frozen=True)
class ReceivedRequest:
    """One chat completions request as the fake saw it."""

    body: dict[str, Any]
    authorization: str
    headers: Mapping[str, str] = field(default_factory=dict)
    """Every request header, names in lower case."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages = self.body.get("messages")
        return messages if isinstance(messages, list) else []

    @property
    def system(self) -> str:
        """The system messages' text, joined by newlines."""
        return "\n".join(
            str(m.get("content", "")) for m in self.messages if m.get("role") == "system"
        )

    @property
    def user(self) -> str:
        """The first user message's text: the prompt the call was made for."""
        return next(
            (str(m.get("content", "")) for m in self.messages if m.get("role") == "user"), ""
        )

    @property
    def text(self) -> str:
        """Every message's text, joined: what to search for words that must not be sent."""
        return "\n".join(str(m.get("content", "")) for m in self.messages)

    @property
    def schema(self) -> Any:
        """The JSON Schema of ``response_format`` (type json_schema), else None."""
        return _response_schema(self.body)


@contextmanager
def running_in_thread(llm: "FakeLLM") -> Iterator["FakeLLM"]:
    """Run ``llm`` on an event loop of its own thread, for fixtures that outlive a test's
    loop (module-scoped ones); it stops when the block ends."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(llm.__aenter__(), loop).result(timeout=10)
    try:
        yield llm
    finally:
        asyncio.run_coroutine_threadsafe(llm.__aexit__(None, None, None), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)


def echo_reply(messages: Sequence[dict[str, Any]]) -> str:
    """The default reply: names the fake and quotes the start of the last user message."""
    user = next(
        (str(m.get("content", "")) for m in reversed(messages) if m.get("role") == "user"), ""
    )
    return f"fake reply to: {user[:120]}"


class FakeLLM:
    """An async context manager running the fake server; ``base_url`` ends in ``/v1``.

    ``reply`` is the text of requests that ask for no schema (None: an echo), or a function
    of the messages answering every request; a schema request gets schema-valid JSON.
    ``invalid_answers`` (settable while running) is how many of the next schema requests get
    JSON that does not match. ``fail_status`` (settable while running) makes every chat
    request answer that status with an OpenAI-style error body.
    ``chunk_delay_s`` spaces streamed chunks. ``backlog`` is the listening socket's accept
    queue (aiohttp's default, 128, unless given: a benchmark opening 1,000 connections at
    once needs more). ``request_count`` counts chat requests
    (including refused ones); ``received`` keeps the last ``keep`` of them (100 unless given).
    """

    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        api_key: str = "",
        reply: str | Replier | None = None,
        fail_status: int | None = None,
        invalid_answers: int = 0,
        chunk_delay_s: float = 0.0,
        models: Sequence[str] = ("fake-model",),
        backlog: int = 128,
        keep: int = 100,
    ) -> None:
        self.latency_s = latency_s
        self.api_key = api_key
        self.reply = reply
        self.fail_status = fail_status
        self.invalid_answers = invalid_answers
        self.chunk_delay_s = chunk_delay_s
        self.models = tuple(models)
        self.backlog = backlog
        self.request_count = 0
        self.received: deque[ReceivedRequest] = deque(maxlen=keep)
        self._runner: web.AppRunner | None = None
        self._port = 0

    @property
    def base_url(self) -> str:
        if self._runner is None:
            raise RuntimeError("FakeLLM is not running: use `async with FakeLLM(...) as llm`")
        return f"http://127.0.0.1:{self._port}/v1"

    async def __aenter__(self) -> "FakeLLM":
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._list_models)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self._port = int(sock.getsockname()[1])
        await web.SockSite(self._runner, sock, backlog=self.backlog).start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _unauthorized(self, request: web.Request) -> web.Response | None:
        if self.api_key and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return _error(401, "invalid_api_key", "Incorrect API key provided.")
        return None

    async def _list_models(self, request: web.Request) -> web.Response:
        refused = self._unauthorized(request)
        if refused is not None:
            return refused
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "plnt"} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.request_count += 1
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "invalid_request_error", "body is not JSON")
        headers = {name.lower(): value for name, value in request.headers.items()}
        authorization = request.headers.get("Authorization", "")
        self.received.append(ReceivedRequest(body, authorization, headers))
        refused = self._unauthorized(request)
        if refused is not None:
            return refused
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if self.fail_status is not None:
            return _error(self.fail_status, "server_error", "The fake LLM is set to fail.")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "invalid_request_error", "messages must be a non-empty list")
        text = self._answer(body, messages)
        model = str(body.get("model", self.models[0]))
        usage = _usage(messages, text)
        if body.get("stream"):
            options = body.get("stream_options")
            with_usage = isinstance(options, dict) and options.get("include_usage") is True
            return await self._stream(request, model, text, usage if with_usage else None)
        return web.json_response(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                    }
                ],
                "usage": usage,
            }
        )

    def _answer(self, body: dict[str, Any], messages: list[dict[str, Any]]) -> str:
        if callable(self.reply):
            return self.reply(messages)
        received = ReceivedRequest(body, "")
        schema = received.schema
        if schema is None:
            schema = schema_in_instructions(received.system)
        if schema is None:
            return self.reply if isinstance(self.reply, str) else echo_reply(messages)
        if self.invalid_answers > 0:
            self.invalid_answers -= 1
            return invalid_answer(schema, text=received.user)
        return json.dumps(instance_of(schema, text=received.user))

    async def _stream(
        self, request: web.Request, model: str, text: str, usage: dict[str, int] | None
    ) -> web.StreamResponse:
        """Chunks as OpenAI sends them: role, one per word, finish, then (when the client
        asked for ``stream_options.include_usage``) a usage chunk with no choices."""
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        chunk_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        created = int(time.time())

        def frame(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            data = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": choices,
                **extra,
            }
            return f"data: {json.dumps(data)}\n\n".encode()

        def chunk(delta: dict[str, str], finish_reason: str | None) -> bytes:
            return frame([{"index": 0, "delta": delta, "finish_reason": finish_reason}])

        await response.write(chunk({"role": "assistant", "content": ""}, None))
        for piece in _CHUNK.findall(text):
            if self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
            await response.write(chunk({"content": piece}, None))
        await response.write(chunk({}, "stop"))
        if usage is not None:
            await response.write(frame([], usage=usage))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _response_schema(body: dict[str, Any]) -> Any:
    response_format = body.get("response_format")
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return None
    json_schema = response_format.get("json_schema")
    return json_schema.get("schema") if isinstance(json_schema, dict) else None


def invalid_answer(schema: Any, *, text: str) -> str:
    """JSON that does not match ``schema``: its first typed or enumerated property given a
    value of the wrong kind (so the error names that property's path), else not JSON."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if isinstance(properties, dict):
        for name, sub in properties.items():
            if isinstance(sub, dict) and ("enum" in sub or "type" in sub):
                value = instance_of(schema, text=text)
                if "enum" in sub:
                    value[name] = "not-one-of-them"
                elif sub.get("type") in ("integer", "number"):
                    value[name] = "not-a-number"
                else:
                    value[name] = 12345
                return json.dumps(value)
    return "this is not JSON"


def _usage(messages: Sequence[dict[str, Any]], text: str) -> dict[str, int]:
    """OpenAI's ``usage`` for a reply, one token per word (the fake has no tokenizer)."""
    prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages)
    completion_tokens = len(text.split())
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _error(status: int, kind: str, message: str) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": kind, "param": None, "code": kind}}, status=status
    )
