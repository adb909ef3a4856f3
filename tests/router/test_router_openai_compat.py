"""Reshaping between OpenAI chat requests/answers and workflow calls (pure functions)."""

import json
from typing import Any

import pytest

from plnt_router.openai_compat import (
    ChatRequestInvalid,
    completion_chunks,
    model_id,
    reply_text,
    split_model,
    workflow_input,
)


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([{"role": "user", "content": "hello"}], {"input": "hello"}),
        (
            [
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": '{"review": "great"}'},
            ],
            {"review": "great"},
        ),
        ([{"role": "user", "content": "[1, 2]"}], {"input": "[1, 2]"}),
        (
            [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                }
            ],
            {"input": "ab"},
        ),
        (
            [{"role": "user", "content": "last user"}, {"role": "assistant", "content": "x"}],
            {"input": "last user"},
        ),
    ],
    ids=[
        "plain-text",
        "json-object-used-as-is",
        "json-array-stays-text",
        "content-parts",
        "skips-assistant",
    ],
)
def test_workflow_input_from_the_last_user_message(messages: Any, expected: dict[str, Any]) -> None:
    assert workflow_input(messages) == expected


@pytest.mark.parametrize(
    "messages",
    [None, "hi", [], [{"role": "system", "content": "x"}], [{"role": "user", "content": 3}]],
    ids=["missing", "not-a-list", "empty", "no-user-message", "content-not-text"],
)
def test_workflow_input_rejects_unusable_messages(messages: Any) -> None:
    with pytest.raises(ChatRequestInvalid):
        workflow_input(messages)


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ({"reply": "hi there", "output": {"x": 1}}, "hi there"),
        ({"output": {"x": 1}}, '{"x": 1}'),
        ({"output": "plain"}, "plain"),
        ({"something": "else"}, '{"something": "else"}'),
    ],
    ids=["reply-wins", "output-as-json", "output-string", "whole-result"],
)
def test_reply_text(result: Any, expected: str) -> None:
    assert reply_text(result) == expected


def test_model_ids_round_trip_through_split_model() -> None:
    assert split_model(model_id(namespace="default", name="echo")) == ("default", "echo")
    assert model_id(namespace="team-a", name="echo") == "team-a/echo"
    assert split_model("team-a/echo") == ("team-a", "echo")


def test_completion_chunks_carry_the_content_once_and_end_with_stop() -> None:
    chunks = completion_chunks(completion_id="c1", created=1, model="echo", content="hey")
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "hey"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    json.dumps(chunks)  # serialisable as SSE data
