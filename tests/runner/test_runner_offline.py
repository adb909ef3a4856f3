"""The offline provider and the rules behind it: deterministic, readable, clearly labelled."""

import json
from typing import Any

import pytest
from runner_support import EXAMPLE_BODY, EXAMPLE_WORKFLOW, REPO

from plnt_common.workflow import parse_workflow
from plnt_runner.executor import Executor
from plnt_runner.heuristics import Lexicon, LexiconInvalid, acknowledge, moderate, read_message
from plnt_runner.offline import LEXICON, OFFLINE_PREFIX, OfflineProvider, answer, instance_of
from plnt_runner.ports import CallOptions
from plnt_runner.prompts import label_schema, messages, schema_instructions
from plnt_runner.response import invocation_body
from plnt_runner.tools import build_tools


class NoHttp:
    async def post_json(self, *, url: str, payload: Any) -> Any:
        raise AssertionError("the example workflow makes no HTTP calls")


async def run_example(body: dict[str, Any]) -> dict[str, Any]:
    workflow = parse_workflow(EXAMPLE_WORKFLOW)
    provider = OfflineProvider()
    executor = Executor(
        workflow=workflow,
        digest="sha256:example",
        tools=build_tools(llm=provider, http=NoHttp(), vars=workflow.spec.vars),
        cache=None,
        step_timeout_s=5,
    )
    invocation = await executor.run(body)
    return invocation_body(
        invocation=invocation,
        sinks=executor.sinks,
        reply=executor.reply,
        workflow=workflow.metadata.name,
        version=workflow.metadata.version,
        revision="r1",
        provider=provider.name,
    )


async def test_example_workflow_drafts_a_readable_on_topic_reply() -> None:
    result = await run_example(EXAMPLE_BODY)

    reply = result["output"]["reply"]
    assert reply.startswith(OFFLINE_PREFIX)
    assert "service" in reply
    assert "parking" in reply
    assert reply == (
        "[offline] Thank you so much for your kind words about our service! "
        "We're sorry to hear about the slow parking. We hope to welcome you back soon!"
    )
    assert result["output"]["safety_check"] == {
        "allowed": True,
        "reasons": [],
        "provider": "offline",
    }
    assert result["steps"]["classify_intent"]["output"] == {"label": "mixed"}
    guidance = result["steps"]["retrieve_brand_voice"]["output"]["guidance"]
    assert guidance.startswith(OFFLINE_PREFIX)
    labelled = [s["output"] for s in result["steps"].values() if "provider" in s["output"]]
    assert len(labelled) == 3
    assert all(output["provider"] == "offline" for output in labelled)
    assert result["provider"] == "offline"


def test_the_tests_example_is_the_example_spec_byte_for_byte() -> None:
    example = REPO / "examples" / "registry" / "review-responder" / "1.2.0" / "workflow.yaml"
    assert example.read_bytes() == EXAMPLE_WORKFLOW


async def test_offline_answers_are_deterministic_across_instances() -> None:
    first = await run_example(EXAMPLE_BODY)
    second = await run_example(dict(EXAMPLE_BODY))
    assert first["output"] == second["output"]
    assert [s["output"] for s in first["steps"].values()] == [
        s["output"] for s in second["steps"].values()
    ]


@pytest.mark.parametrize(
    ("text", "sentiment", "topic"),
    [
        ("Great service but slow parking", "mixed", "parking"),
        ("The food was cold and the staff was rude", "negative", "food"),
        ("Lovely coffee, friendly barista", "positive", "food"),
        ("The waiter was not friendly", "negative", "service"),
        ("We came on a Tuesday", "neutral", "general"),
    ],
    ids=["mixed", "negative", "positive", "negated-praise", "neutral"],
)
def test_reading_finds_sentiment_and_main_topic(text: str, sentiment: str, topic: str) -> None:
    reading = read_message(text, lexicon=LEXICON)
    assert (reading.sentiment, reading.topic) == (sentiment, topic)


def test_an_acknowledgement_follows_the_style_asked_for() -> None:
    reading = read_message("Rude staff and a long wait", lexicon=LEXICON)
    formal = acknowledge(reading=reading, style="formal, first-person singular", lexicon=LEXICON)
    assert "!" not in formal
    assert "I would" in formal
    assert "We" not in formal
    chatty = acknowledge(reading=reading, style="warm", lexicon=LEXICON)
    assert chatty.startswith("Thank you so much")
    assert "rude staff" in chatty
    assert "long wait" in chatty


@pytest.mark.parametrize(
    ("draft", "reason"),
    [
        ("Call us at +1 555 123 4567", "personal data"),
        ("Mail jane@example.com for help", "personal data"),
        ("We will refund you in full", "promises money"),
        ("Don't be stupid", "insulting"),
        ("", "empty"),
        ("Our parking valet will help", "blocked terms: valet"),
    ],
    ids=["phone", "email", "refund", "insult", "empty", "blocked-term"],
)
def test_moderation_refuses_texts_for_a_stated_reason(draft: str, reason: str) -> None:
    reasons = moderate(text=draft, blocked_terms=["valet"], lexicon=LEXICON)
    assert any(reason in r for r in reasons), reasons


def test_moderation_allows_a_plain_polite_text() -> None:
    assert moderate(text="Thank you for visiting us!", blocked_terms=[], lexicon=LEXICON) == []


def test_offline_answers_a_schema_with_matching_json_and_other_prompts_with_a_note() -> None:
    labels = ["billing", "bugs", "room", "positive"]
    asked = messages("Sort this.", "Nice room")
    chosen = json.loads(answer(asked, CallOptions(schema=label_schema(labels))))
    assert chosen == {"label": "positive"}  # the reading's sentiment beats the topic
    chosen = json.loads(answer(asked, CallOptions(schema=label_schema(labels[:3]))))
    assert chosen == {"label": "room"}  # then the topic, by the lexicon's keywords
    in_words = messages("Sort this.\n\n" + schema_instructions(label_schema(labels[:2])), "x")
    assert json.loads(answer(in_words)) == {"label": "billing"}  # nothing matches: the first

    other = answer([{"role": "user", "content": "What is plnt?"}])
    assert other.startswith(OFFLINE_PREFIX)
    assert "PLNT_RUNNER_LLM_BASE_URL" in other


def test_a_minimal_instance_fills_what_the_schema_requires() -> None:
    schema = {
        "type": "object",
        "required": ["queue", "priority", "tags", "urgent"],
        "properties": {
            "queue": {"enum": ["billing", "bugs", "sales"]},
            "priority": {"type": "integer", "minimum": 1, "maximum": 5},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "urgent": {"type": "boolean"},
            "note": {"type": "string", "maxLength": 12},
        },
        "additionalProperties": False,
    }
    value = instance_of(schema, text="The app shows bugs after the update")
    assert value["queue"] == "bugs"
    assert value["priority"] == 1
    assert len(value["tags"]) == 1
    assert value["urgent"] is True
    assert len(value["note"]) <= 12
    assert instance_of(schema, text="Mail jane@example.com")["urgent"] is False


def test_the_words_come_from_the_lexicon_not_the_rules() -> None:
    cars = Lexicon.from_mapping(
        {
            "positive": "smooth",
            "negative": "squeaky",
            "negations": "not",
            "subjects": {"engine": "engine motor", "brakes": "brakes"},
            "insults": [],
        }
    )
    reading = read_message("Smooth motor but squeaky brakes", lexicon=cars)
    assert (reading.sentiment, reading.topic) == ("mixed", "brakes")
    assert read_message("Smooth motor but squeaky brakes", lexicon=LEXICON).sentiment == "neutral"


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ([], "a lexicon is a mapping"),
        ({"subjects": {}, "insults": [], "negative": "", "negations": ""}, "field positive"),
        ({"subjects": {"food": 3}, "insults": []}, "field subjects"),
        ({"subjects": {}, "insults": "damn"}, "field insults"),
    ],
    ids=["not-a-mapping", "missing-words", "keywords-not-text", "insults-not-a-list"],
)
def test_a_malformed_lexicon_is_named_field_by_field(data: object, problem: str) -> None:
    with pytest.raises(LexiconInvalid, match=problem):
        Lexicon.from_mapping(data)
