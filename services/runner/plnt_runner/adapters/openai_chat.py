"""``LLMProvider`` over an OpenAI-compatible ``/chat/completions`` endpoint, via aiohttp.

Works with OpenAI, vLLM, Ollama, LiteLLM and anything that speaks the same wire format,
plain and streamed (server-sent ``data:`` lines ending in ``data: [DONE]``). It does not
retry: a failure surfaces at once as ``LLMUnavailable`` naming the URL and the status.
A shadow call's requests carry ``x-plnt-shadow: 1``, so a gateway can meter them apart.
"""

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import aiohttp

from plnt_common import tracing
from plnt_runner.errors import LLMUnavailable
from plnt_runner.ports import DEFAULT_OPTIONS, CallOptions, Message
from plnt_runner.shadow import outbound_headers
from plnt_runner.usage import TokenUsage

_ERROR_SNIPPET = 300


class OpenAIChatProvider:
    """Calls ``{base_url}/chat/completions`` over a shared, pooled ``aiohttp.ClientSession``.

    The session belongs to the caller, who closes it.
    """

    def __init__(
        self,
        *,
        session: aiohttp.ClientSession,
        base_url: str,
        model: str,
        api_key: str = "",
        timeout_s: float = 60.0,
    ) -> None:
        self._session = session
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    @property
    def name(self) -> str:
        return "openai"

    @property
    def url(self) -> str:
        return self._url

    def _payload(self, messages: Sequence[Message], options: CallOptions) -> dict[str, Any]:
        """The request body: the step's model (else the backend's), its sampling settings,
        and its JSON Schema as ``response_format`` when it asks for one."""
        payload: dict[str, Any] = {
            "model": options.model or self._model,
            "messages": [dict(m) for m in messages],
        }
        if options.temperature is not None:
            payload["temperature"] = options.temperature
        if options.max_tokens is not None:
            payload["max_tokens"] = options.max_tokens
        if options.schema is not None:
            payload["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": options.schema_name,
                    "schema": options.schema,
                    "strict": strict_compatible(options.schema),
                },
            }
        return payload

    async def complete(
        self,
        *,
        messages: Sequence[Message],
        usage: TokenUsage,
        options: CallOptions = DEFAULT_OPTIONS,
    ) -> str:
        """The answer's content; raises ``LLMUnavailable`` on non-2xx, no connection or a body
        without ``choices[0].message.content``. Adds the reported ``usage`` (else an estimate)."""
        payload = self._payload(messages, options)
        try:
            async with self._session.post(
                self._url, json=payload, headers=self._request_headers(), timeout=self._timeout
            ) as response:
                await self._raise_for_status(response)
                body = await response.json(content_type=None)
        except LLMUnavailable:
            raise
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise LLMUnavailable(f"LLM endpoint {self._url} failed: {_describe(exc)}") from None
        try:
            content = body["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise LLMUnavailable(
                f"LLM endpoint {self._url} answered without choices[0].message.content"
            ) from None
        text = content if isinstance(content, str) else ""
        if tracing.ENABLED and isinstance(body.get("model"), str):
            tracing.annotate({"gen_ai.response.model": body["model"]})
        _add_usage(usage, reported=body.get("usage"), messages=messages, text=text)
        return text

    async def stream(
        self,
        *,
        messages: Sequence[Message],
        usage: TokenUsage,
        options: CallOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[str]:
        """Content deltas as the server sends them; raises ``LLMUnavailable`` on non-2xx, a
        broken connection, or a stream cut before ``[DONE]`` or a ``finish_reason``.

        Asks for the final usage chunk (``stream_options.include_usage``) and adds it to
        ``usage``; a server that sends none gets its tokens estimated.
        """
        payload = {
            **self._payload(messages, options),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        finished = False
        reported: Any = None
        deltas: list[str] = []
        try:
            async with self._session.post(
                self._url, json=payload, headers=self._request_headers(), timeout=self._timeout
            ) as response:
                await self._raise_for_status(response)
                async for raw in response.content:
                    line = raw.strip()
                    if not line.startswith(b"data:"):
                        continue  # blank separators, ": keep-alive" comments, event: lines
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        finished = True
                        break
                    chunk = json.loads(data)
                    if isinstance(chunk, dict) and chunk.get("usage"):
                        reported = chunk["usage"]  # the last chunk, with empty choices
                    choice = _first_choice(chunk)
                    finished = finished or bool(choice.get("finish_reason"))
                    delta = (choice.get("delta") or {}).get("content")
                    if isinstance(delta, str) and delta:
                        deltas.append(delta)
                        yield delta
        except LLMUnavailable:
            raise
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise LLMUnavailable(f"LLM stream from {self._url} failed: {_describe(exc)}") from None
        if not finished:
            raise LLMUnavailable(f"LLM stream from {self._url} ended before [DONE]")
        _add_usage(usage, reported=reported, messages=messages, text="".join(deltas))

    def _request_headers(self) -> dict[str, str]:
        """The key, and the current invocation's ``x-plnt-shadow`` when it is a shadow call."""
        return {**self._headers, **outbound_headers()}

    async def _raise_for_status(self, response: aiohttp.ClientResponse) -> None:
        if 200 <= response.status < 300:
            return
        detail = (await response.text(errors="replace"))[:_ERROR_SNIPPET].strip()
        raise LLMUnavailable(
            f"LLM endpoint {self._url} answered {response.status} {response.reason or ''}".rstrip()
            + (f": {detail}" if detail else "")
        )


def strict_compatible(schema: Any) -> bool:
    """Whether OpenAI's strict mode accepts ``schema``: every object lists all its properties
    as required and forbids others. A schema that is not gets ``strict: false`` (the runner
    validates the answer itself either way)."""
    if isinstance(schema, list):
        return all(strict_compatible(item) for item in schema)
    if not isinstance(schema, dict):
        return True
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            return False
        if not isinstance(properties, dict) or set(schema.get("required", ())) != set(properties):
            return False
    return all(
        strict_compatible(value)
        for key, value in schema.items()
        if key not in ("enum", "const", "default", "examples", "required")
    )


def _add_usage(usage: TokenUsage, *, reported: Any, messages: Sequence[Message], text: str) -> None:
    """Add the server's ``usage`` figures, or estimates when it sent none."""
    prompt = reported.get("prompt_tokens") if isinstance(reported, dict) else None
    completion = reported.get("completion_tokens") if isinstance(reported, dict) else None
    if isinstance(prompt, int) and isinstance(completion, int):
        usage.add(prompt_tokens=prompt, completion_tokens=completion)
    else:
        usage.add_estimate(
            prompt_texts=(m.get("content", "") for m in messages), completion_text=text
        )


def _first_choice(chunk: Any) -> dict[str, Any]:
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return {}  # e.g. a usage-only chunk


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
