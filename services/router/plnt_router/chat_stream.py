"""The chat stream a runner's SSE answer becomes: ``chat.completion.chunk`` events. Pure.

``ChatStream`` is fed the runner's events one by one (``token``, ``step``, ``result``,
``error``) and returns the bytes to write to the client for each: a content chunk per
reply token (the runner marks them ``"reply": true``), on the result the reply text
as one chunk if no token came (a cached or non-streaming reply step), the stop chunk and,
when asked, the usage chunk; a failure becomes the in-band ``{"error": ...}`` chunk
OpenAI clients raise on. The transport (reading, writing, ``[DONE]``) is ``chat``'s.
"""

import json
from typing import Any

from plnt_router.openai_compat import ChunkMaker, reply_text, run_usage
from plnt_router.responses import sse_event


class ChatStream:
    """What each runner event becomes on the chat stream; remembers how the run ended."""

    def __init__(self, chunks: ChunkMaker, *, with_usage: bool) -> None:
        self._chunks = chunks
        self._with_usage = with_usage
        self._streamed = False
        self._ended = False
        self.status: int | None = None
        """Set when the run failed after the 200 went out: the status the metrics record."""

    def on_event(self, event: str, data: str) -> bytes:
        if self._ended:
            return b""
        if event == "token":
            token = _json_object(data)
            delta = token.get("delta")
            if token.get("reply") is True and isinstance(delta, str) and delta:
                self._streamed = True
                return self._chunk(self._chunks.content(delta))
        elif event == "result":
            self._ended = True
            result = _json_object(data)
            out = b"" if self._streamed else self._chunk(self._chunks.content(reply_text(result)))
            out += self._chunk(self._chunks.stop())
            usage = run_usage(result)
            if self._with_usage and usage is not None:
                out += self._chunk(self._chunks.usage(usage))
            return out
        elif event == "error":
            failure = _json_object(data)
            status = failure.get("status")
            return self.fail(status if isinstance(status, int) else 500, str(failure.get("error")))
        return b""

    def fail(self, status: int, message: str) -> bytes:
        """The in-band error OpenAI clients raise on (the status line is long gone)."""
        self._ended = True
        self.status = status
        return self._error(message)

    def ending(self) -> bytes:
        """What still has to be said once the runner's stream is over: an error if it
        ended without a result."""
        if self._ended:
            return b""
        return self.fail(502, "the runner's stream ended without a result")

    @staticmethod
    def _error(message: str) -> bytes:
        return sse_event(json.dumps({"error": {"code": "workflow_failed", "message": message}}))

    @staticmethod
    def _chunk(chunk: dict[str, Any]) -> bytes:
        return sse_event(json.dumps(chunk))


def _json_object(data: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
