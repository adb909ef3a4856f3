"""The prompts plnt's LLM-backed tools send, and where a request body keeps its text.

A prompt is two messages: a system message whose first line names the task
(``plnt-task: <task>``) followed by instructions, and a user message holding the task's
payload as JSON. Real models follow the instructions; the offline provider reads the task
line and the payload. This module does no I/O and calls no model.
"""

import json
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from plnt_runner.ports import Message


class Task(StrEnum):
    """What a prompt asks the model to do."""

    CLASSIFY = "classify"
    """Sentiment and topic of the customer's message, as JSON."""
    BRAND_VOICE = "brand_voice"
    """How a reply should sound and what it should address, as plain text."""
    DRAFT = "draft"
    """The reply itself, as plain text."""
    MODERATE = "moderate"
    """Whether a draft may be published, as JSON."""


_TASK_LINE = "plnt-task: "

_INSTRUCTIONS = {
    Task.CLASSIFY: (
        "You classify a customer's message, for example a review. Reply with only a JSON "
        'object: {"sentiment": "positive" | "negative" | "mixed" | "neutral", "topic": the '
        'main subject in one to three words, "praise": [subjects praised], "concerns": '
        "[subjects criticised]}."
    ),
    Task.BRAND_VOICE: (
        "You are the brand-voice knowledge base of a business. From the brand voice hint, the "
        "classification and any retrieved passages in the JSON payload, state in two or three "
        "sentences how the reply to this message should sound and what it should address. "
        "Reply with plain text only."
    ),
    Task.DRAFT: (
        "You draft the business's public reply to a customer's message. Follow the brand voice "
        "and the guidance in the context. Reply with the reply text only, no preamble, at most "
        "80 words."
    ),
    Task.MODERATE: (
        "You check a draft reply before it is published. Refuse it if it contains insults, "
        "hate, personal data (emails, phone numbers), promises of money, legal admissions, or "
        'any of the blocked terms. Reply with only a JSON object: {"allowed": true | false, '
        '"reasons": [short reasons, empty when allowed]}.'
    ),
}

# Keys a request body commonly keeps its text and its brand voice under, in priority order.
_TEXT_KEYS = ("review", "text", "message", "content", "prompt", "query", "question", "input")
_VOICE_KEYS = ("brand_voice", "voice", "tone", "style")


def build_messages(*, task: Task, payload: Mapping[str, Any]) -> list[dict[str, str]]:
    """The chat messages asking for ``task`` on ``payload`` (payload must be JSON-able)."""
    return [
        {"role": "system", "content": f"{_TASK_LINE}{task.value}\n{_INSTRUCTIONS[task]}"},
        {"role": "user", "content": json.dumps(payload, ensure_ascii=False, sort_keys=True)},
    ]


def read_messages(messages: Sequence[Message]) -> tuple[Task | None, dict[str, Any]]:
    """The task and payload of a prompt from ``build_messages``.

    Any other prompt gives ``(None, {"message": <last user content>})``.
    """
    task: Task | None = None
    for message in messages:
        content = message.get("content", "")
        if message.get("role") == "system" and content.startswith(_TASK_LINE):
            first_line = content[len(_TASK_LINE) :].split("\n", 1)[0].strip()
            task = Task(first_line) if first_line in Task.__members__.values() else None
    user = next((m.get("content", "") for m in reversed(messages) if m.get("role") == "user"), "")
    if task is not None:
        payload = extract_json_object(user)
        if payload is not None:
            return task, payload
    return None, {"message": user}


def extract_json_object(text: str) -> dict[str, Any] | None:
    """The JSON object in ``text`` (models often wrap it in prose or fences), else None."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        value = json.loads(text[start : end + 1])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def message_text(body: Mapping[str, Any]) -> str:
    """The customer's text in a request body: the first string under a known key, else the
    whole body as compact JSON."""
    for key in _TEXT_KEYS:
        value = body.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return json.dumps(body, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def brand_voice_hint(body: Mapping[str, Any]) -> str:
    """The brand voice a request body asks for, or "" when it names none."""
    for key in _VOICE_KEYS:
        value = body.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""
