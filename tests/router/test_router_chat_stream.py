"""Chat completions through the router to a real runner app whose LLM is the fake
OpenAI-compatible server: the reply text, usage from the steps' tokens, and the reply step's
tokens streamed as chunks the moment the runner relays them."""

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from plnt_common.routes import RouteEntry, RouteTarget
from plnt_router.table import RouteTable
from plnt_runner.app import create_app as create_runner_app
from plnt_runner.offline import instance_of, schema_in_instructions
from plnt_runner.settings import RunnerSettings
from plnt_testkit.fake_llm import FakeLLM

Factory = Callable[..., Awaitable[Any]]
REPLY = "Thank you for the kind words about our coffee and our team today"
STEPS = [
    {"id": "classify", "tool": "llm.classify", "with": {"labels": ["tea", "coffee"]}},
    {"id": "draft", "tool": "llm.generate", "deps": ["classify"]},
    {"id": "check", "tool": "policy.moderate", "deps": ["draft"]},
]


def workflow_file(tmp_path: Path, *, reply: dict[str, str] | None = None) -> Path:
    spec: dict[str, Any] = {
        "runtime": {"image": "ghcr.io/example/runner:1", "entrypoint": "python -m flow"},
        "steps": STEPS,
    }
    if reply is not None:
        spec["reply"] = reply
    document = {
        "apiVersion": "microagents.dev/v1",
        "kind": "Workflow",
        "metadata": {"name": "chat-flow", "version": "1.0.0"},
        "spec": spec,
    }
    path = tmp_path / "workflow.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


CLASSIFIED = '{"label": "coffee"}'


def answer(messages: Sequence[dict[str, Any]]) -> str:
    """The fake LLM's answer: a label for the classify step, JSON matching the schema any
    other step asks for, REPLY for text."""
    system = "\n".join(str(m["content"]) for m in messages if m.get("role") == "system")
    schema = schema_in_instructions(system)
    if schema is None:
        return REPLY
    if "label" in schema.get("properties", {}):
        return CLASSIFIED
    return json.dumps(instance_of(schema, text=""))


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLM]:
    async with FakeLLM(reply=answer, chunk_delay_s=0.03) as fake:
        yield fake


@pytest.fixture
def start_chat_router(
    tmp_path: Path, llm: FakeLLM, start_app: Factory, start_router: Factory, table: RouteTable
) -> Callable[..., Awaitable[str]]:
    """A real runner of ``chat-flow`` over the fake LLM, routed by a real router."""

    async def start(*, reply: dict[str, str] | None = None, offline: bool = False) -> str:
        settings = RunnerSettings(
            workflow_file=workflow_file(tmp_path, reply=reply),
            llm_base_url="" if offline else llm.base_url,
            revision="r1",
            cache_size=0,
        )
        runner = await start_app(create_runner_app(settings))
        entry = RouteEntry(
            namespace="default", name="chat-flow", stable=RouteTarget(revision="r1", url=runner)
        )
        table.put(key="default.chat-flow", entry=entry)
        return str(await start_router())

    return start


def chat(stream: bool, **extra: Any) -> dict[str, Any]:
    return {
        "model": "chat-flow",
        "messages": [{"role": "user", "content": "Great coffee, friendly staff"}],
        "stream": stream,
        **extra,
    }


def contents(arrivals: list[tuple[float, Any]]) -> list[tuple[float, str]]:
    """The non-empty content deltas of a chat stream, with their arrival times."""
    return [
        (at, chunk["choices"][0]["delta"]["content"])
        for at, chunk in arrivals[:-1]
        if chunk["choices"] and chunk["choices"][0]["delta"].get("content")
    ]


async def read_chunks(response: aiohttp.ClientResponse) -> list[tuple[float, Any]]:
    """Each SSE ``data`` of the answer with its arrival time; ``[DONE]`` as a string."""
    arrivals = []
    async for raw in response.content:
        line = raw.decode().strip()
        if line.startswith("data: "):
            data = line.removeprefix("data: ")
            arrivals.append((time.monotonic(), data if data == "[DONE]" else json.loads(data)))
    return arrivals


async def test_the_reply_step_s_text_is_the_message_and_usage_sums_every_step(
    start_chat_router: Factory, llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    router = await start_chat_router()
    async with http.post(f"{router}/v1/chat/completions", json=chat(False)) as response:
        assert response.status == 200
        body = await response.json()
    assert body["choices"][0]["message"] == {"role": "assistant", "content": REPLY}
    # Three LLM calls; the fake counts one token per word of prompt and answer.
    assert len(llm.received) == 3
    prompts = sum(len(str(m["content"]).split()) for r in llm.received for m in r.body["messages"])
    completions = sum(len(answer(r.body["messages"]).split()) for r in llm.received)
    assert body["usage"] == {
        "prompt_tokens": prompts,
        "completion_tokens": completions,
        "total_tokens": prompts + completions,
    }


async def test_streamed_chat_relays_the_reply_tokens_as_they_come_then_usage_then_done(
    start_chat_router: Factory, http: aiohttp.ClientSession
) -> None:
    router = await start_chat_router()
    request = chat(True, stream_options={"include_usage": True})
    async with http.post(f"{router}/v1/chat/completions", json=request) as response:
        assert response.status == 200
        assert response.content_type == "text/event-stream"
        arrivals = await read_chunks(response)

    assert arrivals[-1][1] == "[DONE]"
    chunks = [data for _, data in arrivals[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content = contents(arrivals)
    assert "".join(delta for _, delta in content) == REPLY
    assert len(content) == len(REPLY.split())  # one chunk per token the LLM streamed
    # The fake LLM spaces its tokens 30 ms apart: relayed as they come, not in one burst.
    assert content[-1][0] - content[0][0] > 0.5 * 0.03 * (len(content) - 1)
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["total_tokens"] > 0


async def test_a_declared_reply_step_that_does_not_stream_comes_as_one_chunk(
    start_chat_router: Factory, http: aiohttp.ClientSession
) -> None:
    router = await start_chat_router(reply={"step": "classify", "field": "label"})
    async with http.post(f"{router}/v1/chat/completions", json=chat(False)) as response:
        plain = (await response.json())["choices"][0]["message"]["content"]
    async with http.post(f"{router}/v1/chat/completions", json=chat(True)) as response:
        arrivals = await read_chunks(response)
    deltas = [delta for _, delta in contents(arrivals)]
    assert plain == "coffee"
    assert deltas == ["coffee"] and arrivals[-1][1] == "[DONE]"
    assert "usage" not in arrivals[-2][1]  # usage only when the client asks for it


async def test_a_workflow_failing_mid_stream_ends_with_an_in_band_error_and_done(
    start_chat_router: Factory, llm: FakeLLM, http: aiohttp.ClientSession
) -> None:
    router = await start_chat_router()
    llm.fail_status = 500
    async with http.post(f"{router}/v1/chat/completions", json=chat(True)) as response:
        assert response.status == 200  # the stream had begun: the error travels in-band
        arrivals = await read_chunks(response)
    errors = [data for _, data in arrivals if isinstance(data, dict) and "error" in data]
    assert len(errors) == 1
    assert errors[0]["error"]["code"] == "workflow_failed"
    assert "classify" in errors[0]["error"]["message"]
    assert arrivals[-1][1] == "[DONE]"


async def test_the_offline_provider_streams_its_reply_word_by_word(
    start_chat_router: Factory, http: aiohttp.ClientSession
) -> None:
    router = await start_chat_router(offline=True)
    async with http.post(f"{router}/v1/chat/completions", json=chat(False)) as response:
        whole = (await response.json())["choices"][0]["message"]["content"]
    async with http.post(f"{router}/v1/chat/completions", json=chat(True)) as response:
        arrivals = await read_chunks(response)
    deltas = [delta for _, delta in contents(arrivals)]
    assert whole.startswith("[offline] ")
    assert len(deltas) == len(whole.split())
    assert "".join(deltas).strip() == whole
