"""The narrow ports tools call through: an LLM and an HTTP POST.

Only ``typing.Protocol`` definitions live here; the adapters implementing them are in
``plnt_runner.adapters`` (I/O) and ``plnt_runner.offline`` (no I/O at all).
"""

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol

from plnt_runner.usage import TokenUsage

Message = Mapping[str, str]
"""One chat message, ``{"role": "system" | "user" | "assistant", "content": "..."}``."""


class LLMProvider(Protocol):
    """A chat-completion model. Both methods raise ``LLMUnavailable`` when it cannot answer,
    and add the tokens the call spent to ``usage``."""

    @property
    def name(self) -> str:
        """Short provider label reported in every output, e.g. ``openai`` or ``offline``."""
        ...

    async def complete(self, *, messages: Sequence[Message], usage: TokenUsage) -> str:
        """The whole assistant reply to ``messages``."""
        ...

    def stream(self, *, messages: Sequence[Message], usage: TokenUsage) -> AsyncIterator[str]:
        """The assistant reply as content deltas, in order, as the model produces them."""
        ...


class HttpPoster(Protocol):
    """Sends one JSON POST; raises ``HttpStepFailed`` on non-2xx, timeout or no connection."""

    async def post_json(self, *, url: str, payload: Any) -> Any:
        """The response body: parsed JSON when it is JSON, else the text."""
        ...
