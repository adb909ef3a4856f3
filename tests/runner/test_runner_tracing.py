"""The runner's spans: a real runner process exporting to a real OTLP/HTTP receiver; and
without an endpoint, no tracer is touched while the runner still continues a traceparent."""

import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NoReturn

import aiohttp
import pytest
import yaml
from runner_support import EXAMPLE_BODY, running_runner, write_example

from plnt_common import tracing
from plnt_runner import executor, handlers
from plnt_runner.settings import RunnerSettings
from plnt_testkit.fake_llm import FakeLLM
from plnt_testkit.otlp_receiver import STATUS_ERROR, OtlpReceiver

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
CALLER_TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
TOOLS_MODULE = """
def lookup(step):
    return {"tier": "gold"}

def check(step):
    raise ValueError("no such customer")
"""


def spec() -> bytes:
    return yaml.safe_dump(
        {
            "apiVersion": "microagents.dev/v1",
            "kind": "Workflow",
            "metadata": {"name": "traced", "version": "1.0.0"},
            "spec": {
                "runtime": {"image": "ghcr.io/example/runner:1"},
                "tools": [
                    {"name": "crm.lookup", "call": "flowtools:lookup"},
                    {"name": "crm.check", "call": "flowtools:check"},
                ],
                "steps": [
                    {"id": "customer", "tool": "crm.lookup"},
                    {
                        "id": "answer",
                        "tool": "llm.chat",
                        "deps": ["customer"],
                        "with": {"prompt": "Tier {{ steps.customer.tier }}: {{ input.text }}"},
                    },
                    {"id": "verify", "tool": "crm.check", "deps": ["answer"]},
                ],
            },
        }
    ).encode()


@asynccontextmanager
async def runner_process(env: dict[str, str], log: Path) -> AsyncIterator[str]:
    with log.open("ab") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "plnt_runner",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), timeout=20)).decode().strip()
        assert line.startswith("listening on http://"), f"{line!r}; see {log}"
        yield line.removeprefix("listening on ")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_failing_code_tool_step_span_carries_the_error_and_content_is_opt_in(
    tmp_path: Path,
) -> None:
    (tmp_path / "flowtools.py").write_text(TOOLS_MODULE)
    (tmp_path / "workflow.yaml").write_bytes(spec())
    async with OtlpReceiver() as receiver, FakeLLM(reply="Thanks, gold member") as llm:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PLNT_", "OTEL_"))}
        env.update(
            PYTHONPATH=f"{tmp_path}{os.pathsep}{env.get('PYTHONPATH', '')}",
            OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{receiver.endpoint}/v1/traces",
            OTEL_BSP_SCHEDULE_DELAY="20",
            OTEL_SERVICE_NAME="triage-runner",
            PLNT_TRACE_CONTENT="true",
            PLNT_RUNNER_PORT="0",
            PLNT_RUNNER_WORKFLOW_FILE=str(tmp_path / "workflow.yaml"),
            PLNT_RUNNER_LLM_BASE_URL=llm.base_url,
        )
        async with (
            runner_process(env, tmp_path / "runner.log") as url,
            aiohttp.ClientSession() as http,
            http.post(
                f"{url}/invoke",
                json={"text": "where is my order"},
                headers={"traceparent": CALLER_TRACEPARENT},
            ) as response,
        ):
            assert response.status == 500
            assert (await response.json())["step"] == "verify"
            answered = TRACEPARENT.fullmatch(response.headers["traceparent"])
            spans = {s.name: s for s in await receiver.wait_for(lambda got: len(got) >= 5)}

    assert answered is not None
    server = spans["POST /invoke"]
    assert (server.service, server.trace_id, server.parent_id) == (
        "triage-runner",
        CALLER_TRACE,
        CALLER_SPAN,
    )
    assert answered.groups() == (CALLER_TRACE, server.span_id)
    assert server.status_code == STATUS_ERROR
    assert server.attributes["http.response.status_code"] == 500
    customer, failed = spans["step customer"], spans["step verify"]
    assert customer.attributes["plnt.step.tool"] == "crm.lookup"
    assert customer.status_code != STATUS_ERROR
    assert failed.parent_id == server.span_id
    assert failed.status_code == STATUS_ERROR
    assert "ValueError: no such customer" in failed.status_message
    assert failed.attributes["error.type"] == "StepFailed"
    assert "exception" in failed.events
    chat = spans["chat gpt-4o-mini"]
    assert chat.parent_id == spans["step answer"].span_id
    sent = json.loads(str(chat.attributes["gen_ai.input.messages"]))
    assert sent[-1] == {"role": "user", "content": "Tier gold: where is my order"}
    answer = json.loads(str(chat.attributes["gen_ai.output.messages"]))
    assert answer == [{"role": "assistant", "content": "Thanks, gold member"}]


class _NoSpans:
    def __getattr__(self, name: str) -> NoReturn:
        raise AssertionError(f"tracing is off, yet the tracer's {name} was used")


async def test_without_an_endpoint_nothing_is_set_up_and_no_span_is_made_yet_the_trace_continues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert tracing.setup("runner", {"OTEL_SERVICE_NAME": "x"}) is False
    assert tracing.ENABLED is False
    monkeypatch.setattr(executor, "_TRACER", _NoSpans())
    monkeypatch.setattr(handlers, "_TRACER", _NoSpans())
    settings = RunnerSettings(workflow_file=write_example(tmp_path))
    async with running_runner(settings) as (url, http, _):
        async with http.post(
            f"{url}/invoke", json=EXAMPLE_BODY, headers={"traceparent": CALLER_TRACEPARENT}
        ) as response:
            assert response.status == 200
            continued = TRACEPARENT.fullmatch(response.headers["traceparent"])
        assert continued is not None
        assert continued.group(1) == CALLER_TRACE
        assert continued.group(2) != CALLER_SPAN
        async with http.post(f"{url}/invoke", json=EXAMPLE_BODY) as response:
            assert response.status == 200
            assert "traceparent" not in response.headers  # none sent: none to continue
        streamed = {"traceparent": CALLER_TRACEPARENT, "Accept": "text/event-stream"}
        async with http.post(f"{url}/invoke", json=EXAMPLE_BODY, headers=streamed) as response:
            assert response.content_type == "text/event-stream"
            continued = TRACEPARENT.fullmatch(response.headers["traceparent"])
            await response.read()
        assert continued is not None and continued.group(1) == CALLER_TRACE


@pytest.mark.parametrize(
    ("environ", "problem"),
    [
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            },
            "OTEL_EXPORTER_OTLP_PROTOCOL='grpc' is not supported",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "PLNT_TRACE_CONTENT": "maybe"},
            "PLNT_TRACE_CONTENT='maybe' is not a boolean",
        ),
    ],
    ids=["grpc-protocol", "content-not-boolean"],
)
def test_unusable_tracing_settings_are_refused_naming_the_variable(
    environ: dict[str, Any], problem: str
) -> None:
    with pytest.raises(tracing.TracingMisconfigured, match=re.escape(problem)):
        tracing.setup("runner", environ)
    assert tracing.ENABLED is False


@pytest.mark.parametrize(
    "incoming",
    [
        "",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
    ],
    ids=["empty", "version", "zero-trace", "zero-parent", "uppercase", "separator"],
)
def test_a_malformed_traceparent_is_not_continued(incoming: str) -> None:
    assert tracing.continued_traceparent(incoming) is None
