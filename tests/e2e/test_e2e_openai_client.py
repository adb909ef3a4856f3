"""The official ``openai`` client against the embedded stack: a workflow deployed by the saga,
served by the real router and runner processes, its LLM steps calling the fake
OpenAI-compatible server. Plain and streamed completions, usage, models, errors."""

import asyncio
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import openai
import pytest
from stack_fixtures import start_stack
from stack_support import Client, publish_spec, run_document, workflow_named

from plnt_cli.supervisor import Supervisor
from plnt_common.bus.bus import Bus
from plnt_runner.offline import schema_in_instructions
from plnt_testkit.fake_llm import FakeLLM, running_in_thread

REPLY = "Thank you for visiting us and for the kind words about our coffee"
CLASSIFIED = '{"label": "positive"}'
VERDICT = '{"allowed": true, "reasons": []}'
TOKEN_GAP_S = 0.02
NAME = "chat-run"


def answer(messages: Sequence[dict[str, Any]]) -> str:
    """What the fake LLM says to each of the example workflow's four prompts."""
    system = "\n".join(str(m["content"]) for m in messages if m.get("role") == "system")
    schema = schema_in_instructions(system) or {}
    properties = schema.get("properties", {})
    return CLASSIFIED if "label" in properties else VERDICT if "allowed" in properties else REPLY


@pytest.fixture(scope="module")
def fake_llm() -> Iterator[FakeLLM]:
    with running_in_thread(FakeLLM(reply=answer, chunk_delay_s=TOKEN_GAP_S)) as llm:
        yield llm


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisor]:
    supervisor = start_stack(tmp_path_factory.mktemp("openai"))
    yield supervisor
    supervisor.stop()


@pytest.fixture(scope="module")
def deployed(stack: Supervisor, fake_llm: FakeLLM, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Deploy the example workflow as NAME on a backend whose LLM is the fake; the router's
    OpenAI base URL."""
    registry = tmp_path_factory.mktemp("registry")

    async def deploy() -> None:
        bus = await Bus.open(stack.config.nats_url, service="test", wait_for_server=True)
        client = Client(bus)
        try:
            await client.apply(backend(fake_llm))
            publish_spec(registry, workflow_named(NAME))
            await client.apply(run_document(NAME, registry=registry, backend="chat-llm"))
            await client.wait_phase(NAME, "Ready")
        finally:
            await bus.close()

    asyncio.run(deploy())
    return f"http://127.0.0.1:{stack.config.router_port}/v1"


def backend(llm: FakeLLM) -> dict[str, Any]:
    return {
        "apiVersion": "plnt.work/v1",
        "kind": "PlntBackend",
        "metadata": {"name": "chat-llm"},
        "spec": {
            "type": "local",
            "gpuClasses": {"nvidia.com/h100": {"resourceName": "nvidia.com/gpu", "capacity": 1}},
            "llm": {"baseUrl": llm.base_url, "model": "fake-model"},
        },
    }


@pytest.fixture
async def client(deployed: str) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=deployed, api_key="unused", max_retries=0) as api:
        yield api


def review(text: str) -> list[Any]:
    """A chat whose user message is the workflow input (a fresh one misses the step cache)."""
    return [{"role": "user", "content": f'{{"review": "{text}", "brand_voice": "warm"}}'}]


async def test_a_completion_carries_the_reply_text_and_the_steps_token_usage(
    client: openai.AsyncOpenAI, fake_llm: FakeLLM
) -> None:
    before = fake_llm.request_count
    completion = await client.chat.completions.create(
        model=NAME, messages=review("Great coffee, lovely staff")
    )
    assert fake_llm.request_count == before + 4  # one LLM call per step
    assert completion.object == "chat.completion"
    assert completion.model == NAME
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content == REPLY
    assert completion.choices[0].finish_reason == "stop"
    usage = completion.usage
    assert usage is not None
    calls = list(fake_llm.received)[-4:]
    prompts = sum(len(str(m["content"]).split()) for c in calls for m in c.body["messages"])
    completions = sum(len(answer(c.body["messages"]).split()) for c in calls)
    assert (usage.prompt_tokens, usage.completion_tokens) == (prompts, completions)
    assert usage.total_tokens == prompts + completions


async def test_a_streamed_completion_relays_the_reply_tokens_as_the_llm_writes_them(
    client: openai.AsyncOpenAI,
) -> None:
    stream = await client.chat.completions.create(
        model=NAME,
        messages=review("Coffee was cold but the cake was great"),
        stream=True,
        stream_options={"include_usage": True},
    )
    deltas: list[tuple[float, str]] = []
    finish_reasons, usages = [], []
    async for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        if chunk.usage is not None:
            usages.append(chunk.usage)
        for choice in chunk.choices:
            if choice.delta.content:
                deltas.append((time.monotonic(), choice.delta.content))
            if choice.finish_reason:
                finish_reasons.append(choice.finish_reason)
    assert "".join(text for _, text in deltas) == REPLY
    assert len(deltas) == len(REPLY.split())
    # The LLM spaces its tokens TOKEN_GAP_S apart; a buffered answer would arrive at once.
    assert deltas[-1][0] - deltas[0][0] > 0.5 * TOKEN_GAP_S * (len(deltas) - 1)
    assert finish_reasons == ["stop"]
    assert len(usages) == 1 and usages[0].total_tokens > 0


async def test_models_list_the_workflow_and_an_unknown_model_is_a_clear_404(
    client: openai.AsyncOpenAI,
) -> None:
    models = [model.id async for model in client.models.list()]
    assert NAME in models
    with pytest.raises(openai.NotFoundError) as refused:
        await client.chat.completions.create(model="no-such-flow", messages=review("hi"))
    assert "workflow 'no-such-flow' is not deployed" in str(refused.value)
