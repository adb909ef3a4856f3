"""The test kit's fake LLM, judged by the official ``openai`` client: its structured-output
answers parse into the caller's model, its streams carry usage, and it records what it was
sent. Tests that assert on prompts trust this fake, so the real client is its oracle."""

from typing import Literal

import openai
import pytest
from pydantic import BaseModel

from plnt_testkit.fake_llm import FakeLLM


class Route(BaseModel):
    queue: Literal["billing", "bugs", "sales"]
    priority: int
    urgent: bool


MESSAGES = [
    {"role": "system", "content": "You route support tickets."},
    {"role": "user", "content": "The app crashes with bugs after the update"},
]


async def test_a_structured_output_answer_parses_into_the_callers_model() -> None:
    async with FakeLLM() as llm:
        client = openai.AsyncOpenAI(api_key="sk-x", base_url=llm.base_url, max_retries=0)
        completion = await client.beta.chat.completions.parse(
            model="gpt-4o-mini",
            messages=MESSAGES,  # type: ignore[arg-type]
            response_format=Route,
            temperature=0,
            max_tokens=50,
        )
        await client.close()
        sent = llm.received[-1]
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, Route)
    assert parsed.queue == "bugs"  # the enum option the prompt names
    assert sent.schema is not None
    assert sent.schema["properties"]["queue"]["enum"] == ["billing", "bugs", "sales"]
    assert sent.body["response_format"]["json_schema"]["strict"] is True
    assert (sent.body["model"], sent.body["temperature"], sent.body["max_tokens"]) == (
        "gpt-4o-mini",
        0,
        50,
    )
    assert sent.user == "The app crashes with bugs after the update"


async def test_invalid_answers_come_first_when_asked_for() -> None:
    async with FakeLLM(invalid_answers=1) as llm:
        client = openai.AsyncOpenAI(api_key="sk-x", base_url=llm.base_url, max_retries=0)
        with pytest.raises(Exception, match="queue"):  # pydantic refuses the first answer
            await client.beta.chat.completions.parse(
                model="m",
                messages=MESSAGES,  # type: ignore[arg-type]
                response_format=Route,
            )
        second = await client.beta.chat.completions.parse(
            model="m",
            messages=MESSAGES,  # type: ignore[arg-type]
            response_format=Route,
        )
        await client.close()
    assert isinstance(second.choices[0].message.parsed, Route)


async def test_a_stream_with_include_usage_ends_with_the_usage_chunk() -> None:
    async with FakeLLM(reply="one two three") as llm:
        client = openai.AsyncOpenAI(api_key="sk-x", base_url=llm.base_url, max_retries=0)
        stream = await client.chat.completions.create(
            model="m",
            messages=MESSAGES,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
        await client.close()
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "one two three"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 3
    assert chunks[-1].usage.prompt_tokens == 12  # one token per word of the two messages


async def test_a_plain_completion_echoes_and_records_the_request() -> None:
    async with FakeLLM() as llm:
        client = openai.AsyncOpenAI(api_key="sk-x", base_url=llm.base_url, max_retries=0)
        completion = await client.chat.completions.create(
            model="m",
            messages=MESSAGES,  # type: ignore[arg-type]
        )
        await client.close()
        sent = llm.received[-1]
    assert completion.choices[0].message.content == (
        "fake reply to: The app crashes with bugs after the update"
    )
    assert sent.system == "You route support tickets."
    assert sent.schema is None
