"""The offline LLM provider: deterministic answers to any prompt, computed without a model.

Used when no ``llm_base_url`` is configured so plnt can be tried without an API key. It
answers what it is asked for: JSON that matches the schema when a call asks for one (a
``response_format`` schema, or the schema in the instructions), else text. It reads the
first line of the first user message (what the prompt is about) with
``plnt_runner.heuristics`` and the example data shipped beside it (``offline_lexicon.yaml``,
read once at import): an enum takes the option that best matches that reading, a boolean
says whether the whole message passes moderation; text is an acknowledgement written with
the data's phrases when the request asks for one (the data's ``compose_when`` words), else a
note that no model is configured. Every text it writes
starts with ``[offline]`` so nobody mistakes it for a model's answer. Answering performs no
I/O and never fails.
"""

import asyncio
import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from importlib import resources
from typing import Any

import yaml

from plnt_common import tracing
from plnt_runner import heuristics
from plnt_runner.ports import DEFAULT_OPTIONS, CallOptions, Message
from plnt_runner.usage import TokenUsage

OFFLINE_PREFIX = "[offline] "
SCHEMA_MARKER = "matches this JSON Schema:\n"
"""What ``prompts.schema_instructions`` puts before the schema it asks for."""
_CHUNK = re.compile(r"\S+\s*")
_WORD = re.compile(r"[a-z0-9']+")
LEXICON = heuristics.Lexicon.from_mapping(
    yaml.safe_load(resources.files(__package__).joinpath("offline_lexicon.yaml").read_text())
)
"""The words and phrases the offline provider reads and writes with: example data."""


class OfflineProvider:
    """An ``LLMProvider`` that needs no network and gives the same answer to the same prompt."""

    @property
    def name(self) -> str:
        return "offline"

    async def complete(
        self,
        *,
        messages: Sequence[Message],
        usage: TokenUsage,
        options: CallOptions = DEFAULT_OPTIONS,
    ) -> str:
        tracing.annotate({"gen_ai.response.model": self.name})  # no model answers here
        return _answer_counted(messages, usage, options)

    async def stream(
        self,
        *,
        messages: Sequence[Message],
        usage: TokenUsage,
        options: CallOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[str]:
        for chunk in _CHUNK.findall(_answer_counted(messages, usage, options)):
            yield chunk
            # Yield to the loop between deltas, as a network stream would, so SSE clients
            # see tokens arrive one by one rather than in a single burst.
            await asyncio.sleep(0)


def _answer_counted(messages: Sequence[Message], usage: TokenUsage, options: CallOptions) -> str:
    """``answer``, with its estimated tokens added to ``usage`` (no model counts them here)."""
    text = answer(messages, options)
    usage.add_estimate(prompt_texts=(m.get("content", "") for m in messages), completion_text=text)
    return text


def answer(messages: Sequence[Message], options: CallOptions = DEFAULT_OPTIONS) -> str:
    """The offline answer to ``messages``: JSON matching the schema asked for, else text."""
    system = "\n".join(m.get("content", "") for m in messages if m.get("role") == "system")
    user = next((m.get("content", "") for m in messages if m.get("role") == "user"), "")
    schema = options.schema if options.schema is not None else schema_in_instructions(system)
    if schema is not None:
        return json.dumps(instance_of(schema, text=user), ensure_ascii=False)
    asked = set(_WORD.findall(f"{system}\n{user}".lower()))
    if asked & LEXICON.compose_when:
        reading = heuristics.read_message(_subject(user), lexicon=LEXICON)
        return OFFLINE_PREFIX + heuristics.acknowledge(reading=reading, style=user, lexicon=LEXICON)
    return (
        f"{OFFLINE_PREFIX}No LLM is configured (set PLNT_RUNNER_LLM_BASE_URL). "
        f"You asked: {user[:200]}"
    )


def _subject(text: str) -> str:
    """What a prompt is about: its first non-blank line (the rest is context, such as the
    outputs of earlier steps, which would blur the reading)."""
    return next((line for line in text.splitlines() if line.strip()), "")


def schema_in_instructions(system: str) -> Any:
    """The schema a system message asks for in ``prompts.schema_instructions``' words, or
    None when it asks for none."""
    at = system.find(SCHEMA_MARKER)
    if at < 0:
        return None
    try:
        return json.JSONDecoder().raw_decode(system[at + len(SCHEMA_MARKER) :].lstrip())[0]
    except ValueError:
        return None


def instance_of(schema: Any, *, text: str) -> Any:
    """A small value that matches ``schema``, chosen from ``text``: an enum takes the option
    that best matches the text (its sentiment, its topic, then shared words, then the first),
    a boolean is true when the text passes moderation, a list of texts holds the
    moderation's reasons, numbers take their lower bound, objects get every property."""
    return _Instance(text).of(schema)


class _Instance:
    def __init__(self, text: str) -> None:
        self.text = text
        self.words = set(_WORD.findall(text.lower()))
        self.reading = heuristics.read_message(_subject(text), lexicon=LEXICON)
        self.problems = heuristics.moderate(text=text, blocked_terms=(), lexicon=LEXICON)

    def of(self, schema: Any) -> Any:
        if not isinstance(schema, Mapping):
            return {}  # `true` or `{}`: anything goes
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return self.choose(schema["enum"])
        for key in ("anyOf", "oneOf", "allOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                return self.of(options[0])
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
        if kind is None:
            kind = "object" if "properties" in schema else "array" if "items" in schema else ""
        return self.typed(str(kind), schema)

    def typed(self, kind: str, schema: Mapping[str, Any]) -> Any:
        if kind == "object":
            properties = schema.get("properties")
            properties = properties if isinstance(properties, Mapping) else {}
            value = {name: self.of(sub) for name, sub in properties.items()}
            for name in schema.get("required", ()):
                value.setdefault(name, "")
            return value
        if kind == "array":
            items = schema.get("items", {})
            if isinstance(items, Mapping) and items.get("type") == "string" and self.problems:
                found = list(self.problems)
            else:
                found = []
            wanted = int(schema.get("minItems", 0))
            while len(found) < wanted:
                found.append(self.of(items))
            return found[: schema.get("maxItems", len(found))]
        if kind == "boolean":
            return not self.problems
        if kind in ("integer", "number"):
            low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
            value = low + 1 if "exclusiveMinimum" in schema and "minimum" not in schema else low
            return int(value) if kind == "integer" else value
        if kind == "null":
            return None
        return self.string(schema)

    def string(self, schema: Mapping[str, Any]) -> str:
        excerpt = " ".join(self.text.split())[:80]
        value = f"{OFFLINE_PREFIX}{excerpt}".strip()
        value = value[: int(schema.get("maxLength", len(value)))]
        return value.ljust(int(schema.get("minLength", 0)), ".")

    def choose(self, options: list[Any]) -> Any:
        """The option that best matches the text; the first on a tie."""

        def score(option: Any) -> int:
            name = str(option).lower()
            points = 0
            if name == self.reading.sentiment:
                points += 100
            if name == self.reading.topic:
                points += 50
            keywords = {k for k, subject in LEXICON.subjects.items() if subject == name}
            points += 10 * len(self.words & (set(_WORD.findall(name)) | keywords))
            return points

        return max(options, key=score)  # max keeps the first of equal scores
