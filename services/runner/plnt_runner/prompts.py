"""The messages plnt's LLM tools send when a step brings no templates of its own, and the
wording of structured-output requests.

A step's ``system`` and ``prompt`` templates replace these. Without them each tool sends
generic instructions (a system message) and the step's material (a user message: the
request body and the outputs of the step's deps as JSON). Nothing here knows any one use
case; that wording belongs in the workflow spec. This module does no I/O and calls no model.
"""

import json
from collections.abc import Iterable, Mapping
from typing import Any

from plnt_runner.ports import Message

CHAT = (
    "You are a careful assistant. Do what the user's message asks. It is JSON: `input` is "
    "the request, `steps` the results of the steps before this one."
)
GENERATE = (
    "Write the text the user's message calls for. It is JSON: `input` is the request, "
    "`steps` the results of the steps before this one. Answer with the text only, no preamble."
)
RETRIEVE = (
    "Answer the request in the user's message from the passages retrieved for it, in two or "
    "three sentences of plain text; say so when the passages do not cover it."
)
DEFAULT_RULES = (
    "no insults, slurs or hate",
    "no personal data such as email addresses or phone numbers",
    "no promises of money and no admissions of legal liability",
)
"""What ``policy.moderate`` checks when its step names no ``rules``."""


def classify_instructions(labels: Iterable[str]) -> str:
    """The system message of ``llm.classify``: choose exactly one of ``labels``."""
    return (
        "Classify the user's message. Choose exactly one of these labels: "
        + ", ".join(json.dumps(label) for label in labels)
        + "."
    )


def moderate_instructions(rules: Iterable[str]) -> str:
    """The system message of ``policy.moderate``: check the user's message against ``rules``."""
    listed = "\n".join(f"- {rule}" for rule in rules)
    return (
        "Check the text in the user's message against these rules:\n"
        f"{listed}\n"
        "It is allowed only when it breaks none of them; give a short reason for each rule "
        "it breaks."
    )


MODERATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "allowed": {"type": "boolean"},
        "reasons": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["allowed", "reasons"],
    "additionalProperties": False,
}
"""The verdict ``policy.moderate`` asks the model for."""


def label_schema(labels: Iterable[str]) -> dict[str, Any]:
    """The answer ``llm.classify`` asks for: ``{"label": <one of labels>}``."""
    return {
        "type": "object",
        "properties": {"label": {"type": "string", "enum": list(labels)}},
        "required": ["label"],
        "additionalProperties": False,
    }


def schema_instructions(schema: Mapping[str, Any]) -> str:
    """What a system message says when the backend takes no ``response_format``."""
    return (
        "Answer with only a JSON value (no prose, no code fences) that matches this JSON "
        f"Schema:\n{json.dumps(schema, ensure_ascii=False, sort_keys=True)}"
    )


def repair_message(problem: str) -> str:
    """The user message that asks once more after an answer did not match the schema."""
    return (
        f"Your answer did not match the JSON Schema: {problem}. Answer again with only the "
        "corrected JSON value."
    )


def messages(system: str, user: str) -> list[Message]:
    """A system and a user message (a blank system message is left out)."""
    sent: list[Message] = []
    if system.strip():
        sent.append({"role": "system", "content": system})
    sent.append({"role": "user", "content": user})
    return sent


def material(body: Mapping[str, Any], outputs: Mapping[str, Any]) -> str:
    """The default user message: the request and the deps' outputs as JSON."""
    payload = {"input": body, "steps": {k: without_provider(v) for k, v in outputs.items()}}
    return json.dumps(payload, ensure_ascii=False, sort_keys=True)


def text_of(body: Mapping[str, Any], outputs: Mapping[str, Any]) -> str:
    """The text a step works on by default: the first dep output's ``text``, else the
    material as JSON."""
    for output in outputs.values():
        if isinstance(output, Mapping) and isinstance(output.get("text"), str):
            return str(output["text"])
    return material(body, outputs)


def without_provider(output: Any) -> Any:
    """An output minus its provider label, which says nothing to the model."""
    if isinstance(output, Mapping):
        return {k: v for k, v in output.items() if k != "provider"}
    return output


def parse_json(text: str) -> Any:
    """The JSON value in ``text``: the whole text, else inside code fences, else the
    outermost object; raises ``ValueError`` when there is none."""
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.split("\n", 1)[1] if "\n" in stripped else ""
        stripped = stripped.rsplit("```", 1)[0].strip()
    try:
        return json.loads(stripped)
    except ValueError:
        pass
    start, end = stripped.find("{"), stripped.rfind("}")
    if 0 <= start < end:
        return json.loads(stripped[start : end + 1])
    raise ValueError("the answer holds no JSON value")
