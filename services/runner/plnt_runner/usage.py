"""Token usage: what an invocation's LLM calls spent, in OpenAI's ``usage`` terms. No I/O.

Providers add what each call cost to the ``TokenUsage`` they are handed: the figures the
model reported, or, when it reported none (the offline provider, a server without usage
reporting), an estimate of one token per whitespace-separated word.
"""

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(slots=True)
class TokenUsage:
    """Prompt and completion tokens, summed over the calls added to it."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, *, prompt_tokens: int, completion_tokens: int) -> None:
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens

    def add_estimate(self, *, prompt_texts: Iterable[str], completion_text: str) -> None:
        """Add a call the model reported no usage for: one token per word."""
        self.add(
            prompt_tokens=estimate_tokens(prompt_texts),
            completion_tokens=estimate_tokens([completion_text]),
        )

    def as_dict(self) -> dict[str, int]:
        """The OpenAI ``usage`` object: prompt, completion and total tokens."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


def estimate_tokens(texts: Iterable[str]) -> int:
    """One token per word: the estimate used when the model reports no usage."""
    return sum(len(text.split()) for text in texts)


def total_usage(usages: Iterable[TokenUsage]) -> TokenUsage:
    total = TokenUsage()
    for usage in usages:
        total.add(prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens)
    return total
