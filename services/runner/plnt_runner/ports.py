"""The narrow ports tools call through: an LLM and an HTTP POST.

Only ``typing.Protocol`` definitions live here; the adapters implementing them are in
``plnt_runner.adapters`` (I/O) and ``plnt_runner.offline`` (no I/O at all).
"""

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from plnt_runner.usage import TokenUsage

Message = Mapping[str, str]
"""One chat message, ``{"role": "system" | "user" | "assistant", "content": "..."}``."""


@dataclass(frozen=True, slots=True)
class CallOptions:
    """What one LLM call asks for beyond its messages; None leaves the provider's default."""

    model: str | None = None
    """The model name; None sends the backend's ``llm.model``."""
    temperature: float | None = None
    max_tokens: int | None = None
    schema: Mapping[str, Any] | None = None
    """A JSON Schema the answer must match: sent as OpenAI ``response_format`` of type
    ``json_schema`` by providers that support it (the caller validates the answer)."""
    schema_name: str = "output"
    """The schema's name in ``response_format`` (letters, digits, ``_`` and ``-``)."""


DEFAULT_OPTIONS = CallOptions()


class LLMProvider(Protocol):
    """A chat-completion model. Both methods raise ``LLMUnavailable`` when it cannot answer,
    and add the tokens the call spent to ``usage``."""

    @property
    def name(self) -> str:
        """Short provider label reported in every output, e.g. ``openai`` or ``offline``."""
        ...

    async def complete(
        self, *, messages: Sequence[Message], usage: TokenUsage, options: CallOptions = ...
    ) -> str:
        """The whole assistant answer to ``messages``."""
        ...

    def stream(
        self, *, messages: Sequence[Message], usage: TokenUsage, options: CallOptions = ...
    ) -> AsyncIterator[str]:
        """The assistant answer as content deltas, in order, as the model produces them."""
        ...


class HttpPoster(Protocol):
    """Sends one JSON POST; raises ``HttpStepFailed`` on non-2xx, timeout or no connection."""

    async def post_json(self, *, url: str, payload: Any) -> Any:
        """The response body: parsed JSON when it is JSON, else the text."""
        ...
