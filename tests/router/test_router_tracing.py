"""One trace per invocation, through a real router process, a real runner process, its steps
and the fake OpenAI-compatible LLM, exported over OTLP/HTTP to a real receiver."""

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
import yaml
from nats.aio.client import Client

from plnt_common.bus.provision import ensure_jetstream
from plnt_common.routes import RouteEntry, RouteTarget
from plnt_common.subjects import ROUTES_BUCKET
from plnt_testkit.fake_llm import FakeLLM
from plnt_testkit.otlp_receiver import (
    SPAN_KIND_CLIENT,
    SPAN_KIND_SERVER,
    OtlpReceiver,
    ReceivedSpan,
)

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
CALLER_TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
ANSWER = '{"label": "good"}'
"""What the fake LLM answers every call: a label for the classify step, text for the chat."""
TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")


def workflow(steps: Sequence[Mapping[str, object]]) -> bytes:
    return yaml.safe_dump(
        {
            "apiVersion": "microagents.dev/v1",
            "kind": "Workflow",
            "metadata": {"name": "traced", "version": "1.0.0"},
            "spec": {"runtime": {"image": "ghcr.io/example/runner:1"}, "steps": list(steps)},
        }
    ).encode()


TWO_LLM_STEPS = workflow(
    [
        {"id": "label", "tool": "llm.classify", "with": {"labels": ["good", "bad"]}},
        {
            "id": "answer",
            "tool": "llm.chat",
            "deps": ["label"],
            "with": {"prompt": "Say {{ steps.label.label }}: {{ input.text }}", "model": "m-2"},
        },
    ]
)


def tracing_env(receiver: OtlpReceiver, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLNT_", "OTEL_"))}
    env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_BSP_SCHEDULE_DELAY="20",  # export within milliseconds: the test waits on spans
        **more,
    )
    return env


@asynccontextmanager
async def process(module: str, env: dict[str, str], log: Path) -> AsyncIterator[str]:
    """``python -m module`` on port 0; yields the URL its ``listening on`` line printed."""
    with log.open("ab") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", module, env=env, stdout=asyncio.subprocess.PIPE, stderr=stderr
        )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), timeout=20)).decode().strip()
        assert line.startswith("listening on http://"), f"{module}: {line!r}; see {log}"
        yield line.removeprefix("listening on ")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def runner_env(receiver: OtlpReceiver, spec: Path, llm: FakeLLM, **more: str) -> dict[str, str]:
    return tracing_env(
        receiver,
        PLNT_RUNNER_PORT="0",
        PLNT_RUNNER_WORKFLOW_FILE=str(spec),
        PLNT_RUNNER_LLM_BASE_URL=llm.base_url,
        PLNT_RUNNER_LLM_MODEL="m-1",
        PLNT_RUNNER_LLM_INPUT_PRICE_PER_MTOK_USD="2",
        PLNT_RUNNER_LLM_OUTPUT_PRICE_PER_MTOK_USD="8",
        **more,
    )


def by_name(spans: Sequence[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {span.name: span for span in spans}


async def test_an_invocation_is_one_trace_router_runner_steps_llm_continuing_the_callers(
    tmp_path: Path, nc: Client, nats_url: str
) -> None:
    spec = tmp_path / "workflow.yaml"
    spec.write_bytes(TWO_LLM_STEPS)
    async with AsyncExitStack() as stack:
        receiver = await stack.enter_async_context(OtlpReceiver())
        llm = await stack.enter_async_context(FakeLLM(reply=lambda _: ANSWER))
        runner = await stack.enter_async_context(
            process("plnt_runner", runner_env(receiver, spec, llm), tmp_path / "runner.log")
        )
        js = nc.jetstream()
        await ensure_jetstream(js)
        kv = await js.key_value(ROUTES_BUCKET)
        target = RouteTarget(revision="r1", url=runner)
        entry = RouteEntry(namespace="default", name="traced", stable=target)
        await kv.put("default.traced", entry.model_dump_json().encode())
        router = await stack.enter_async_context(
            process(
                "plnt_router",
                tracing_env(
                    receiver, PLNT_NATS_URL=nats_url, PLNT_ROUTER_PORT="0", PLNT_ROUTER_AUTH="none"
                ),
                tmp_path / "router.log",
            )
        )
        http = await stack.enter_async_context(aiohttp.ClientSession())
        for _ in range(100):
            async with http.get(f"{router}/readyz") as ready:
                if ready.status == 200:
                    break
            await asyncio.sleep(0.1)
        async with http.post(
            f"{router}/workflows/traced/invoke",
            json={"text": "great service"},
            headers={"traceparent": CALLER_TRACEPARENT},
        ) as response:
            assert response.status == 200, await response.text()
            answered = TRACEPARENT.fullmatch(response.headers["traceparent"])
        assert answered is not None, response.headers["traceparent"]
        asked = list(llm.received)  # the requests of this invocation

        spans = by_name(await receiver.wait_for(lambda got: len(got) >= 6))
        exemplar = f'# {{trace_id="{CALLER_TRACE}"}}'
        for url in (router, runner):
            openmetrics = {"Accept": "application/openmetrics-text; version=1.0.0"}
            async with http.get(f"{url}/metrics", headers=openmetrics) as scraped:
                assert scraped.content_type == "application/openmetrics-text"
                latency = [
                    line
                    for line in (await scraped.text()).splitlines()
                    if line.startswith("plnt_invocation_duration_seconds_bucket")
                    and exemplar in line
                ]
            assert latency, f"{url}/metrics has no latency exemplar of the call's trace"
            async with http.get(f"{url}/metrics") as scraped:  # Prometheus text: no exemplars
                assert exemplar not in await scraped.text()
        assert sorted(spans) == [
            "POST /invoke",
            "POST /workflows/{name}/invoke",
            "chat m-1",
            "chat m-2",
            "step answer",
            "step label",
        ]
        assert {span.trace_id for span in spans.values()} == {CALLER_TRACE}
        router_span = spans["POST /workflows/{name}/invoke"]
        assert (router_span.service, router_span.kind) == ("plnt-router", SPAN_KIND_SERVER)
        assert router_span.parent_id == CALLER_SPAN
        assert answered.groups() == (CALLER_TRACE, router_span.span_id)
        runner_span = spans["POST /invoke"]
        assert (runner_span.service, runner_span.parent_id) == ("plnt-runner", router_span.span_id)
        for step, llm_call in (("label", "chat m-1"), ("answer", "chat m-2")):
            step_span = spans[f"step {step}"]
            assert step_span.parent_id == runner_span.span_id
            assert step_span.attributes["plnt.step.id"] == step
            assert step_span.attributes["plnt.step.cache_hit"] is False
            assert spans[llm_call].parent_id == step_span.span_id
            assert spans[llm_call].kind == SPAN_KIND_CLIENT
        assert spans["step label"].attributes["plnt.step.tool"] == "llm.classify"

        # The OpenAI-compatible endpoint is traced the same way, in a trace of its own.
        chat = {"model": "traced", "messages": [{"role": "user", "content": "hello"}]}
        async with http.post(f"{router}/v1/chat/completions", json=chat) as response:
            chat_trace = TRACEPARENT.fullmatch(response.headers["traceparent"])
        assert chat_trace is not None, response.headers["traceparent"]
        received = await receiver.wait_for(
            lambda got: (
                any(s.name == "POST /v1/chat/completions" for s in got)
                and any(s.name == "POST /invoke" and s.trace_id == chat_trace[1] for s in got)
            )
        )
        in_chat = by_name([span for span in received if span.trace_id == chat_trace[1]])
        assert in_chat["POST /v1/chat/completions"].parent_id == ""
        assert in_chat["POST /invoke"].parent_id == chat_trace[2]

        # The GenAI attributes equal what the fake LLM was asked and reported.
        reported = {r.body["model"]: r for r in asked}
        for model in ("m-1", "m-2"):
            attributes = spans[f"chat {model}"].attributes
            request = reported[model]
            prompt_tokens = sum(len(str(m["content"]).split()) for m in request.messages)
            assert attributes["gen_ai.operation.name"] == "chat"
            assert attributes["gen_ai.provider.name"] == "openai"
            assert attributes["gen_ai.request.model"] == model
            assert attributes["gen_ai.response.model"] == model
            assert attributes["gen_ai.usage.input_tokens"] == prompt_tokens
            assert attributes["gen_ai.usage.output_tokens"] == len(ANSWER.split())
            cost = (prompt_tokens * 2 + len(ANSWER.split()) * 8) / 1e6
            assert attributes["plnt.cost_usd"] == pytest.approx(cost)
            assert "gen_ai.input.messages" not in attributes  # content is opt-in


async def test_a_router_given_an_unsupported_otlp_protocol_exits_2_with_one_line(
    nats_url: str,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLNT_", "OTEL_"))}
    env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318",
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
        PLNT_NATS_URL=nats_url,
        PLNT_ROUTER_PORT="0",
        PLNT_ROUTER_AUTH="none",
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "plnt_router",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(proc.communicate(), timeout=20)
    assert proc.returncode == 2
    lines = stderr.decode().strip().splitlines()
    assert lines[-1].startswith("plnt router: OTEL_EXPORTER_OTLP_PROTOCOL='grpc' is not supported")
    assert "Traceback" not in stderr.decode()
