"""An ``LLMProvider`` that wraps another in a span per call, with the GenAI conventions.

Installed by ``app`` only while tracing is on, so an untraced runner pays nothing. Each call
is a client span ``chat <model>``, a child of its step's span, with
``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model``,
``gen_ai.response.model`` (set by the adapter that learns it), the call's
``gen_ai.usage.input_tokens``/``output_tokens``, and ``plnt.cost_usd`` at the backend's
prices. Prompt and completion text are added only with ``PLNT_TRACE_CONTENT=true``.
"""

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, StatusCode

from plnt_common import tracing
from plnt_runner.errors import LLMUnavailable
from plnt_runner.ports import DEFAULT_OPTIONS, CallOptions, LLMProvider, Message
from plnt_runner.usage import TokenUsage

_TRACER = tracing.tracer("plnt.runner.llm")
RESPONSE_MODEL = "gen_ai.response.model"


class TracedLLM:
    """``LLMProvider`` over ``inner``; ``default_model`` is what a call without a model asks."""

    def __init__(
        self,
        inner: LLMProvider,
        *,
        default_model: str,
        input_price_per_mtok_usd: float,
        output_price_per_mtok_usd: float,
    ) -> None:
        self._inner = inner
        self._default_model = default_model
        self._input_price = input_price_per_mtok_usd
        self._output_price = output_price_per_mtok_usd

    @property
    def name(self) -> str:
        return self._inner.name

    async def complete(
        self,
        *,
        messages: Sequence[Message],
        usage: TokenUsage,
        options: CallOptions = DEFAULT_OPTIONS,
    ) -> str:
        span = self._start(messages, options)
        spent = TokenUsage()
        try:
            with trace.use_span(span, record_exception=False, set_status_on_exception=False):
                text = await self._inner.complete(messages=messages, usage=spent, options=options)
        except LLMUnavailable as exc:
            _failed(span, exc)
            raise
        except BaseException:  # cancelled with its step, or a bug: the span still ends
            span.end()
            raise
        finally:
            usage.add(prompt_tokens=spent.prompt_tokens, completion_tokens=spent.completion_tokens)
        self._finish(span, spent, text)
        return text

    async def stream(
        self,
        *,
        messages: Sequence[Message],
        usage: TokenUsage,
        options: CallOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[str]:
        # Not made current: a generator's frames run in its consumer's context.
        span = self._start(messages, options)
        spent = TokenUsage()
        deltas: list[str] = []
        try:
            async for delta in self._inner.stream(messages=messages, usage=spent, options=options):
                deltas.append(delta)
                yield delta
        except LLMUnavailable as exc:
            _failed(span, exc)
            raise
        except BaseException:  # cancelled, or the consumer stopped early
            span.end()
            raise
        finally:
            usage.add(prompt_tokens=spent.prompt_tokens, completion_tokens=spent.completion_tokens)
        self._finish(span, spent, "".join(deltas))

    def _start(self, messages: Sequence[Message], options: CallOptions) -> Span:
        model = options.model or self._default_model
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self._inner.name,
            "gen_ai.request.model": model,
        }
        if options.temperature is not None:
            attributes["gen_ai.request.temperature"] = options.temperature
        if options.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = options.max_tokens
        if tracing.CONTENT_ENABLED:
            attributes["gen_ai.input.messages"] = json.dumps(
                [dict(m) for m in messages], ensure_ascii=False
            )
        return _TRACER.start_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes)

    def _finish(self, span: Span, spent: TokenUsage, text: str) -> None:
        cost = (
            spent.prompt_tokens * self._input_price + spent.completion_tokens * self._output_price
        ) / 1_000_000
        span.set_attributes(
            {
                "gen_ai.usage.input_tokens": spent.prompt_tokens,
                "gen_ai.usage.output_tokens": spent.completion_tokens,
                "plnt.cost_usd": cost,
            }
        )
        if tracing.CONTENT_ENABLED:
            span.set_attribute(
                "gen_ai.output.messages",
                json.dumps([{"role": "assistant", "content": text}], ensure_ascii=False),
            )
        span.end()


def _failed(span: Span, exc: LLMUnavailable) -> None:
    span.set_attribute("error.type", exc.reason)
    span.record_exception(exc)
    span.set_status(StatusCode.ERROR, str(exc))
    span.end()
