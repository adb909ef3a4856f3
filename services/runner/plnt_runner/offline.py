"""The offline LLM provider: deterministic answers computed from plnt's own prompts.

Used when no ``llm_base_url`` is configured so plnt can be tried without an API key. It
reads the task and payload of a prompt built by ``plnt_runner.prompts`` and answers with
``plnt_runner.heuristics`` and the example lexicon shipped beside it
(``offline_lexicon.yaml``, read once at import); every text it writes starts with
``[offline]`` so nobody mistakes it for a model's answer. Answering performs no I/O and
never fails.
"""

import asyncio
import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from importlib import resources
from typing import Any

import yaml

from plnt_runner import heuristics
from plnt_runner.ports import Message
from plnt_runner.prompts import Task, read_messages
from plnt_runner.usage import TokenUsage

OFFLINE_PREFIX = "[offline] "
_CHUNK = re.compile(r"\S+\s*")
LEXICON = heuristics.Lexicon.from_mapping(
    yaml.safe_load(resources.files(__package__).joinpath("offline_lexicon.yaml").read_text())
)
"""The words the offline provider reads messages with: example data for customer reviews."""


class OfflineProvider:
    """An ``LLMProvider`` that needs no network and gives the same answer to the same prompt."""

    @property
    def name(self) -> str:
        return "offline"

    async def complete(self, *, messages: Sequence[Message], usage: TokenUsage) -> str:
        return _answer_counted(messages, usage)

    async def stream(self, *, messages: Sequence[Message], usage: TokenUsage) -> AsyncIterator[str]:
        for chunk in _CHUNK.findall(_answer_counted(messages, usage)):
            yield chunk
            # Yield to the loop between deltas, as a network stream would, so SSE clients
            # see tokens arrive one by one rather than in a single burst.
            await asyncio.sleep(0)


def _answer_counted(messages: Sequence[Message], usage: TokenUsage) -> str:
    """``answer``, with its estimated tokens added to ``usage`` (no model counts them here)."""
    text = answer(messages)
    usage.add_estimate(prompt_texts=(m.get("content", "") for m in messages), completion_text=text)
    return text


def answer(messages: Sequence[Message]) -> str:
    """The offline reply to ``messages``: JSON for classify and moderate, text otherwise."""
    task, payload = read_messages(messages)
    message = str(payload.get("message", ""))
    if task is Task.CLASSIFY:
        reading = heuristics.read_message(message, lexicon=LEXICON)
        return json.dumps(
            {
                "sentiment": reading.sentiment,
                "topic": reading.topic,
                "praise": heuristics.subjects_of(reading.praise),
                "concerns": heuristics.subjects_of(reading.concerns),
            }
        )
    if task is Task.BRAND_VOICE:
        passages = [str(p) for p in payload.get("passages", ()) if isinstance(p, str)]
        return OFFLINE_PREFIX + heuristics.voice_guidance(
            reading=heuristics.read_message(message, lexicon=LEXICON),
            voice=str(payload.get("brand_voice", "")),
            passages=passages,
        )
    if task is Task.DRAFT:
        return OFFLINE_PREFIX + heuristics.compose_reply(
            reading=heuristics.read_message(message, lexicon=LEXICON),
            voice=_draft_voice(payload),
        )
    if task is Task.MODERATE:
        draft = str(payload.get("draft", "")).removeprefix(OFFLINE_PREFIX)
        terms = payload.get("blocked_terms", ())
        reasons = heuristics.moderate(
            draft=draft,
            blocked_terms=[str(t) for t in terms] if isinstance(terms, list) else [],
            lexicon=LEXICON,
        )
        return json.dumps({"allowed": not reasons, "reasons": reasons})
    return (
        f"{OFFLINE_PREFIX}No LLM is configured (set PLNT_RUNNER_LLM_BASE_URL). "
        f"You asked: {message[:200]}"
    )


def _draft_voice(payload: Mapping[str, Any]) -> str:
    """The voice a draft should use: the request's, else one a context step retrieved."""
    voice = payload.get("brand_voice")
    if isinstance(voice, str) and voice:
        return voice
    context = payload.get("context")
    if isinstance(context, Mapping):
        for output in context.values():
            if isinstance(output, Mapping) and isinstance(output.get("brand_voice"), str):
                return str(output["brand_voice"])
    return ""
