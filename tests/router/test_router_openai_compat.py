"""Reshaping between OpenAI chat requests/answers and workflow calls (pure functions)."""

import json
from typing import Any

import pytest

from plnt_router.openai_compat import (
    ChatRequestInvalid,
    ChunkMaker,
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
    assert workflow_input(messages, max_depth=64) == expected


@pytest.mark.parametrize(
    "messages",
    [None, "hi", [], [{"role": "system", "content": "x"}], [{"role": "user", "content": 3}]],
    ids=["missing", "not-a-list", "empty", "no-user-message", "content-not-text"],
)
def test_workflow_input_rejects_unusable_messages(messages: Any) -> None:
    with pytest.raises(ChatRequestInvalid):
        workflow_input(messages, max_depth=64)


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


def test_chunk_maker_streams_role_content_stop_and_the_usage_chunk_last() -> None:
    maker = ChunkMaker(completion_id="c1", created=1, model="echo")
    chunks = [maker.role(), maker.content("he"), maker.content("y"), maker.stop()]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert {c["id"] for c in chunks} == {"c1"}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "hey"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert maker.usage(usage) == {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "echo",
        "choices": [],
        "usage": usage,
    }
    json.dumps(chunks)  # serialisable as SSE data


def test_a_user_message_of_too_deeply_nested_json_is_plain_text_input() -> None:
    deep = "[" * 100 + "]" * 100
    messages = [{"role": "user", "content": deep}]
    assert workflow_input(messages, max_depth=64) == {"input": deep}
    ok = '{"a": [[1]]}'
    assert workflow_input([{"role": "user", "content": ok}], max_depth=3) == {"a": [[1]]}
    assert workflow_input([{"role": "user", "content": ok}], max_depth=2) == {"input": ok}
