"""Translation between OpenAI's chat-completions shapes and a workflow call. Pure functions.

``/v1/chat/completions`` lets OpenAI-compatible clients call a workflow: the model names
the workflow, the last user message becomes the workflow input, and the runner's answer
becomes the assistant message. This module only reshapes data; it does no I/O and knows
nothing of HTTP, routing or streaming transport.
"""

import json
from typing import Any

from plnt_router.json_body import JsonRejected, load_limited
from plnt_router.logic import DEFAULT_NAMESPACE


class ChatRequestInvalid(ValueError):
    """The chat request cannot be turned into a workflow call; the message says why."""


def split_model(model: str) -> tuple[str, str]:
    """``"name"`` -> ``("default", "name")``; ``"ns/name"`` -> ``("ns", "name")``."""
    namespace, sep, name = model.partition("/")
    return (namespace, name) if sep else (DEFAULT_NAMESPACE, model)


def model_id(*, namespace: str, name: str) -> str:
    """The model id ``/v1/models`` lists for a workflow; ``split_model`` reverses it."""
    return name if namespace == DEFAULT_NAMESPACE else f"{namespace}/{name}"


def _text_of(content: Any) -> str:
    """A message's text: the string itself, or the text parts of a content-part list joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        )
    raise ChatRequestInvalid("message content must be a string or a list of content parts")


def workflow_input(messages: Any, *, max_depth: int) -> dict[str, Any]:
    """The workflow input for a chat: the last user message, as an object.

    A message whose text is a JSON object (nested at most ``max_depth`` deep) is used as
    that object (clients can send the exact workflow input); any other text becomes
    ``{"input": text}``. Raises ``ChatRequestInvalid`` when ``messages`` is not a list or
    holds no user message.
    """
    if not isinstance(messages, list):
        raise ChatRequestInvalid("'messages' must be a list of chat messages")
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            text = _text_of(message.get("content"))
            try:
                parsed = load_limited(text, max_depth=max_depth)
            except JsonRejected:
                return {"input": text}
            return parsed if isinstance(parsed, dict) else {"input": text}
    raise ChatRequestInvalid("'messages' holds no message with role 'user'")


def reply_text(result: Any) -> str:
    """The assistant message for a runner result: its ``reply`` text (the text the workflow
    declares as its reply), else its ``output`` as JSON.

    A result with neither is returned whole as JSON, so the client still sees the answer.
    """
    if isinstance(result, dict):
        reply = result.get("reply")
        if isinstance(reply, str):
            return reply
        if "output" in result:
            output = result["output"]
            return output if isinstance(output, str) else json.dumps(output)
    return json.dumps(result)


def completion(
    *,
    completion_id: str,
    created: int,
    model: str,
    content: str,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``chat.completion`` object with one assistant choice; ``usage`` only when known."""
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }
    if usage is not None:
        body["usage"] = usage
    return body


class ChunkMaker:
    """The ``chat.completion.chunk`` objects of one streamed completion (same id throughout).

    A stream is ``role()``, any number of ``content(delta)``, ``stop()``, then ``usage(...)``
    when the client asked for it; the SSE framing and ``data: [DONE]`` are the transport's.
    """

    def __init__(self, *, completion_id: str, created: int, model: str) -> None:
        self.completion_id = completion_id
        self.created = created
        self._head = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
        }

    def _choice(self, delta: dict[str, str], finish_reason: str | None) -> dict[str, Any]:
        return {
            **self._head,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }

    def role(self) -> dict[str, Any]:
        return self._choice({"role": "assistant", "content": ""}, None)

    def content(self, delta: str) -> dict[str, Any]:
        return self._choice({"content": delta}, None)

    def stop(self) -> dict[str, Any]:
        return self._choice({}, "stop")

    def usage(self, usage: dict[str, Any]) -> dict[str, Any]:
        """The last chunk of ``stream_options.include_usage``: no choices, the usage."""
        return {**self._head, "choices": [], "usage": usage}


def run_usage(result: Any) -> dict[str, Any] | None:
    """A runner result's ``usage`` object, or None when it has none."""
    usage = result.get("usage") if isinstance(result, dict) else None
    return usage if isinstance(usage, dict) else None


def model_list(model_ids: list[str]) -> dict[str, Any]:
    """The OpenAI ``list`` object of ``model`` entries for ``/v1/models``."""
    return {
        "object": "list",
        "data": [
            {"id": mid, "object": "model", "created": 0, "owned_by": "plnt"}
            for mid in sorted(model_ids)
        ],
    }
