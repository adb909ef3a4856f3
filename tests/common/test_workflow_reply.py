"""``spec.reply`` of a Workflow: which step's output is the reply text, its default, and
the one-line refusals of a reply that cannot work."""

from typing import Any

import pytest
import yaml

from plnt_common.errors import SpecInvalid
from plnt_common.workflow import Reply, parse_workflow

EXAMPLE_STEPS = [
    {"id": "classify_intent", "tool": "llm.classify"},
    {"id": "retrieve_brand_voice", "tool": "rag.query", "deps": ["classify_intent"]},
    {"id": "draft_reply", "tool": "llm.generate", "deps": ["retrieve_brand_voice"]},
    {"id": "safety_check", "tool": "policy.moderate", "deps": ["draft_reply"]},
]


def spec(steps: list[dict[str, Any]], reply: Any = None) -> bytes:
    body: dict[str, Any] = {"runtime": {"image": "img:1", "entrypoint": "run"}, "steps": steps}
    if reply is not None:
        body["reply"] = reply
    document = {
        "apiVersion": "microagents.dev/v1",
        "kind": "Workflow",
        "metadata": {"name": "flow", "version": "1.0.0"},
        "spec": body,
    }
    return yaml.safe_dump(document).encode()


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        (EXAMPLE_STEPS, Reply(step="draft_reply", field="text")),
        (
            [
                {"id": "first", "tool": "llm.generate"},
                {"id": "second", "tool": "llm.generate", "deps": ["first"]},
                {
                    "id": "notify",
                    "tool": "http.request",
                    "deps": ["second"],
                    "with": {"url": "http://x"},
                },
            ],
            Reply(step="second", field="text"),
        ),
        (
            [
                {"id": "a", "tool": "llm.classify"},
                {"id": "b", "tool": "rag.query", "deps": ["a"]},
                {"id": "c", "tool": "llm.classify"},
            ],
            Reply(step="c", field="text"),
        ),
    ],
    ids=["example-draft-not-the-moderation", "last-generate-in-dependency-order", "last-sink"],
)
def test_the_default_reply_is_the_last_generate_step_else_the_last_sink(
    steps: list[dict[str, Any]], expected: Reply
) -> None:
    assert parse_workflow(spec(steps)).spec.reply_source() == expected


def test_a_declared_reply_wins_over_the_default() -> None:
    workflow = parse_workflow(
        spec(EXAMPLE_STEPS, {"step": "retrieve_brand_voice", "field": "guidance"})
    )
    assert workflow.spec.reply_source() == Reply(step="retrieve_brand_voice", field="guidance")
    assert (
        parse_workflow(spec(EXAMPLE_STEPS, {"step": "draft_reply"})).spec.reply_source().field
        == "text"
    )


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (
            {"step": "nope"},
            "reply.step 'nope' is not a step (steps: classify_intent, retrieve_brand_voice",
        ),
        (
            {"step": "safety_check"},
            "reply.field 'text': step 'safety_check' (policy.moderate) writes no text",
        ),
        (
            {"step": "retrieve_brand_voice", "field": "text"},
            "step 'retrieve_brand_voice' (rag.query) writes text in: guidance",
        ),
        ({"step": "draft_reply", "field": "a b"}, "spec.reply.field: String should match pattern"),
        ({"step": "draft_reply", "extra": 1}, "spec.reply.extra: Extra inputs are not permitted"),
        ("draft_reply", "spec.reply: Input should be a valid dictionary"),
    ],
    ids=[
        "unknown-step",
        "tool-writes-no-text",
        "wrong-field",
        "bad-field-name",
        "extra-key",
        "not-a-mapping",
    ],
)
def test_a_reply_that_cannot_work_is_refused_in_one_line(reply: Any, message: str) -> None:
    with pytest.raises(SpecInvalid) as refused:
        parse_workflow(spec(EXAMPLE_STEPS, reply))
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_an_http_step_may_be_the_reply_with_any_field() -> None:
    steps = [{"id": "call", "tool": "http.request", "with": {"url": "http://x"}}]
    assert parse_workflow(
        spec(steps, {"step": "call", "field": "answer"})
    ).spec.reply_source() == Reply(step="call", field="answer")
