"""The ``LLMProvider`` port: one contract run against the offline provider and the OpenAI
adapter (over a real FakeLLM server), then what only the OpenAI adapter does."""

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from plnt_common.nats_server import free_port
from plnt_runner.adapters.openai_chat import OpenAIChatProvider
from plnt_runner.errors import LLMUnavailable
from plnt_runner.offline import OfflineProvider
from plnt_runner.ports import LLMProvider
from plnt_runner.prompts import messages
from plnt_runner.usage import TokenUsage
from plnt_testkit.fake_llm import FakeLLM

MESSAGES = messages(
    "Write a short answer to the message.", "Lovely coffee but a long wait. Style: warm"
)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


@pytest.fixture(params=["offline", "openai"])
async def provider(
    request: pytest.FixtureRequest, session: aiohttp.ClientSession
) -> AsyncIterator[LLMProvider]:
    if request.param == "offline":
        yield OfflineProvider()
        return
    async with FakeLLM(reply="We are glad you liked it. See you soon!") as llm:
        yield OpenAIChatProvider(session=session, base_url=llm.base_url, model="fake-model")


class TestLLMProviderContract:
    async def test_complete_returns_non_empty_text(self, provider: LLMProvider) -> None:
        text = await provider.complete(messages=MESSAGES, usage=TokenUsage())
        assert isinstance(text, str)
        assert text.strip()

    async def test_stream_yields_several_deltas_that_join_into_the_complete_reply(
        self, provider: LLMProvider
    ) -> None:
        deltas = [d async for d in provider.stream(messages=MESSAGES, usage=TokenUsage())]
        assert len(deltas) > 1
        assert "".join(deltas) == await provider.complete(messages=MESSAGES, usage=TokenUsage())

    async def test_the_same_prompt_gets_the_same_answer(self, provider: LLMProvider) -> None:
        first = await provider.complete(messages=MESSAGES, usage=TokenUsage())
        assert first == await provider.complete(messages=MESSAGES, usage=TokenUsage())

    def test_name_is_a_short_label(self, provider: LLMProvider) -> None:
        assert provider.name in ("offline", "openai")


async def test_openai_adapter_sends_model_and_messages_and_returns_the_content(
    session: aiohttp.ClientSession,
) -> None:
    async with FakeLLM(reply="Thanks!") as llm:
        provider = OpenAIChatProvider(session=session, base_url=llm.base_url + "/", model="gpt-x")
        assert await provider.complete(messages=MESSAGES, usage=TokenUsage()) == "Thanks!"
        assert llm.request_count == 1
        sent = llm.received[-1]
        assert sent.body == {"model": "gpt-x", "messages": MESSAGES}
        assert sent.authorization == ""  # no key configured: no header at all


async def test_openai_adapter_streams_with_stream_true(session: aiohttp.ClientSession) -> None:
    async with FakeLLM(reply="one two three four") as llm:
        provider = OpenAIChatProvider(session=session, base_url=llm.base_url, model="m")
        deltas = [d async for d in provider.stream(messages=MESSAGES, usage=TokenUsage())]
        assert deltas == ["one ", "two ", "three ", "four"]
        assert llm.received[-1].body["stream"] is True


async def test_openai_adapter_sends_the_api_key_as_a_bearer_token(
    session: aiohttp.ClientSession,
) -> None:
    async with FakeLLM(api_key="sk-right", reply="ok") as llm:
        good = OpenAIChatProvider(
            session=session, base_url=llm.base_url, model="m", api_key="sk-right"
        )
        assert await good.complete(messages=MESSAGES, usage=TokenUsage()) == "ok"
        assert llm.received[-1].authorization == "Bearer sk-right"

        bad = OpenAIChatProvider(
            session=session, base_url=llm.base_url, model="m", api_key="sk-wrong"
        )
        with pytest.raises(LLMUnavailable, match=r"answered 401 Unauthorized: .*Incorrect API key"):
            await bad.complete(messages=MESSAGES, usage=TokenUsage())
        with pytest.raises(LLMUnavailable, match="answered 401"):
            [d async for d in bad.stream(messages=MESSAGES, usage=TokenUsage())]


async def test_openai_adapter_turns_a_500_into_an_error_naming_url_and_status(
    session: aiohttp.ClientSession,
) -> None:
    async with FakeLLM(fail_status=500) as llm:
        provider = OpenAIChatProvider(session=session, base_url=llm.base_url, model="m")
        url = f"{llm.base_url}/chat/completions"
        with pytest.raises(LLMUnavailable) as caught:
            await provider.complete(messages=MESSAGES, usage=TokenUsage())
        assert str(caught.value).startswith(
            f"LLM endpoint {url} answered 500 Internal Server Error"
        )
        with pytest.raises(LLMUnavailable, match=f"{url} answered 500"):
            [d async for d in provider.stream(messages=MESSAGES, usage=TokenUsage())]


async def test_openai_adapter_reports_an_unreachable_endpoint(
    session: aiohttp.ClientSession,
) -> None:
    base_url = f"http://127.0.0.1:{free_port()}/v1"
    provider = OpenAIChatProvider(session=session, base_url=base_url, model="m")
    with pytest.raises(LLMUnavailable, match=f"LLM endpoint {base_url}/chat/completions failed"):
        await provider.complete(messages=MESSAGES, usage=TokenUsage())


async def test_openai_adapter_times_out(session: aiohttp.ClientSession) -> None:
    async with FakeLLM(latency_s=1.0) as llm:
        provider = OpenAIChatProvider(
            session=session, base_url=llm.base_url, model="m", timeout_s=0.1
        )
        with pytest.raises(LLMUnavailable, match="failed: timed out"):
            await provider.complete(messages=MESSAGES, usage=TokenUsage())


async def _collect(stream: AsyncIterator[str], *, into: list[str]) -> None:
    async for delta in stream:
        into.append(delta)


async def _odd_server(handler: Any) -> TestServer:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    return TestServer(app, host="127.0.0.1")


async def test_openai_adapter_refuses_a_body_without_choices(
    session: aiohttp.ClientSession,
) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"object": "chat.completion", "choices": []})

    async with await _odd_server(handler) as server:
        provider = OpenAIChatProvider(
            session=session, base_url=str(server.make_url("/v1")), model="m"
        )
        with pytest.raises(LLMUnavailable, match=r"without choices\[0\].message.content"):
            await provider.complete(messages=MESSAGES, usage=TokenUsage())


async def test_openai_adapter_refuses_a_stream_cut_before_done(
    session: aiohttp.ClientSession,
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"choices": [{"delta": {"content": "half"}}]}\n\n')
        await response.write_eof()
        return response

    async with await _odd_server(handler) as server:
        provider = OpenAIChatProvider(
            session=session, base_url=str(server.make_url("/v1")), model="m"
        )
        deltas: list[str] = []
        with pytest.raises(LLMUnavailable, match=r"ended before \[DONE\]"):
            await _collect(provider.stream(messages=MESSAGES, usage=TokenUsage()), into=deltas)
        assert deltas == ["half"]


async def test_fake_llm_lists_models_and_guards_them_with_the_key(
    session: aiohttp.ClientSession,
) -> None:
    async with FakeLLM(api_key="k", models=("a", "b")) as llm:
        async with session.get(f"{llm.base_url}/models") as response:
            assert response.status == 401
        async with session.get(
            f"{llm.base_url}/models", headers={"Authorization": "Bearer k"}
        ) as response:
            body = await response.json()
        assert [m["id"] for m in body["data"]] == ["a", "b"]


async def test_fake_llm_answers_in_the_openai_shape_with_usage(
    session: aiohttp.ClientSession,
) -> None:
    async with (
        FakeLLM(reply="hello there") as llm,
        session.post(
            f"{llm.base_url}/chat/completions",
            json={"model": "m1", "messages": [{"role": "user", "content": "hi you"}]},
        ) as response,
    ):
        body = await response.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == "m1"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "hello there"}
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"] == {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}


async def test_fake_llm_streams_a_final_usage_chunk_only_when_asked(
    session: aiohttp.ClientSession,
) -> None:
    request = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi you"}]}
    async with FakeLLM(reply="one two three") as llm:
        streams = []
        for extra in ({}, {"stream_options": {"include_usage": True}}):
            async with session.post(
                f"{llm.base_url}/chat/completions", json={**request, **extra}
            ) as response:
                lines = [line.strip() async for line in response.content if line.strip()]
            streams.append([line.removeprefix(b"data: ") for line in lines])
    plain, with_usage = streams
    assert plain[-1] == with_usage[-1] == b"[DONE]"
    assert all(b'"usage"' not in data for data in plain)
    last = json.loads(with_usage[-2])
    assert last["choices"] == []
    assert last["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    assert len(with_usage) == len(plain) + 1


async def test_openai_adapter_adds_the_usage_the_server_reports_plain_and_streamed(
    session: aiohttp.ClientSession,
) -> None:
    sent: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        sent.append(body)
        if not body.get("stream"):
            usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
            return web.json_response({"choices": [{"message": {"content": "hi"}}], "usage": usage})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(
            b'data: {"choices": [{"delta": {"content": "hi"}, "finish_reason": "stop"}]}\n\n'
            b'data: {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}\n\n'
            b"data: [DONE]\n\n"
        )
        await response.write_eof()
        return response

    async with await _odd_server(handler) as server:
        provider = OpenAIChatProvider(
            session=session, base_url=str(server.make_url("/v1")), model="m"
        )
        usage = TokenUsage()
        await provider.complete(messages=MESSAGES, usage=usage)
        assert [d async for d in provider.stream(messages=MESSAGES, usage=usage)] == ["hi"]
    assert sent[-1]["stream_options"] == {"include_usage": True}
    assert usage.as_dict() == {"prompt_tokens": 16, "completion_tokens": 10, "total_tokens": 26}


async def test_openai_adapter_estimates_tokens_a_server_does_not_report(
    session: aiohttp.ClientSession,
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response({"choices": [{"message": {"content": "four words right here"}}]})

    async with await _odd_server(handler) as server:
        provider = OpenAIChatProvider(
            session=session, base_url=str(server.make_url("/v1")), model="m"
        )
        usage = TokenUsage(prompt_tokens=1)
        await provider.complete(messages=MESSAGES, usage=usage)
    prompt = sum(len(m["content"].split()) for m in MESSAGES)
    assert (usage.prompt_tokens, usage.completion_tokens) == (1 + prompt, 4)
