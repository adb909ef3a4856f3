"""``python -m plnt_runner`` as a process: the listening line, graceful SIGTERM, bad settings."""

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from runner_support import EXAMPLE_BODY, eventually, write_example

from plnt_runner.settings import RunnerSettings
from plnt_testkit.fake_llm import FakeLLM


def runner_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLNT_")}
    env.update({f"PLNT_RUNNER_{k.upper()}": v for k, v in settings.items()})
    return env


@asynccontextmanager
async def runner_process(**settings: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """A runner process on port 0 and the URL its `listening on` line announced."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "plnt_runner",
        env=runner_env(port="0", **settings),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), timeout=20)).decode()
        match = re.fullmatch(r"listening on (http://127\.0\.0\.1:(\d+))\n", line)
        assert match, f"unexpected first line {line!r}"
        assert int(match.group(2)) > 0
        yield process, match.group(1)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_process_announces_its_port_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    workflow = write_example(tmp_path)
    async with runner_process(workflow_file=str(workflow), revision="r9") as (process, url):
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/healthz") as response:
                assert response.status == 200
            async with http.post(f"{url}/invoke", json=EXAMPLE_BODY) as response:
                assert response.headers["x-plnt-revision"] == "r9"
                assert (await response.json())["output"]["reply"].startswith("[offline]")
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), timeout=20) == 0


async def test_sigterm_lets_an_in_flight_invocation_finish_and_refuses_new_ones(
    tmp_path: Path,
) -> None:
    workflow = write_example(tmp_path)
    async with (
        FakeLLM(latency_s=0.4) as llm,
        runner_process(workflow_file=str(workflow), llm_base_url=llm.base_url) as (process, url),
        aiohttp.ClientSession() as http,
    ):

        async def invoke() -> int:
            async with http.post(f"{url}/invoke", json=EXAMPLE_BODY) as response:
                await response.read()
                return response.status

        in_flight = asyncio.create_task(invoke())
        await eventually(lambda: _started(llm))
        process.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.3)
        async with aiohttp.ClientSession() as fresh:  # a new connection, not a pooled one
            with pytest.raises(aiohttp.ClientConnectionError):
                await fresh.get(f"{url}/healthz")
        assert await in_flight == 200
        assert llm.request_count == 4
        assert await asyncio.wait_for(process.wait(), timeout=20) == 0


async def test_sigterm_answers_a_call_whose_body_is_still_arriving(tmp_path: Path) -> None:
    """aiohttp's own shutdown stops reading bodies: the runner drains before it."""
    workflow = write_example(tmp_path)
    async with runner_process(workflow_file=str(workflow)) as (process, url):
        host, port = url.removeprefix("http://").split(":")
        body = json.dumps(EXAMPLE_BODY).encode()
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /invoke HTTP/1.1\r\nHost: runner\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body[:10]
        )
        await writer.drain()
        await asyncio.sleep(0.3)
        process.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.3)
        writer.write(body[10:])
        answer = await asyncio.wait_for(reader.read(), timeout=5)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        assert b'"reply"' in answer
        assert await asyncio.wait_for(process.wait(), timeout=10) == 0


async def _started(llm: FakeLLM) -> bool:
    return llm.request_count > 0


async def test_missing_workflow_setting_exits_2_naming_the_variable() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "plnt_runner",
        env=runner_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=20)
    assert process.returncode == 2
    assert "PLNT_RUNNER_WORKFLOW_FILE" in stderr.decode()


async def test_invalid_workflow_exits_1_with_the_reason(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: microagents.dev/v1\nkind: Workflow\n")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "plnt_runner",
        env=runner_env(workflow_file=str(bad)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=20)
    assert process.returncode == 1
    assert "spec is invalid" in stderr.decode()


def test_settings_read_the_runner_prefix_and_the_common_variables(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PLNT_RUNNER_WORKFLOW_FILE", str(tmp_path / "w.yaml"))
    monkeypatch.setenv("PLNT_RUNNER_PORT", "8181")
    monkeypatch.setenv("PLNT_RUNNER_MAX_IN_FLIGHT", "3")
    monkeypatch.setenv("PLNT_LOG_LEVEL", "debug")
    settings = RunnerSettings()
    assert settings.workflow_file == tmp_path / "w.yaml"
    assert (settings.port, settings.max_in_flight, settings.log_level) == (8181, 3, "debug")
    assert (settings.host, settings.llm_model, settings.max_queue) == (
        "127.0.0.1",
        "gpt-4o-mini",
        256,
    )
    assert (settings.cache_size, settings.max_body_bytes, settings.step_timeout_s) == (
        4096,
        1 << 20,
        60,
    )
    assert all(field.description for field in RunnerSettings.model_fields.values())


async def test_a_draining_runner_refuses_a_new_call_on_an_open_connection_as_not_run(
    tmp_path: Path,
) -> None:
    """The 503 says the call was not run (x-plnt-draining), so the router may send it on."""
    workflow = write_example(tmp_path)
    async with (
        FakeLLM(latency_s=0.6) as llm,
        runner_process(workflow_file=str(workflow), llm_base_url=llm.base_url) as (process, url),
        aiohttp.ClientSession() as pooled,
        aiohttp.ClientSession() as other,
    ):
        async with pooled.get(f"{url}/healthz") as response:  # leaves a kept-alive connection
            assert response.status == 200

        async def invoke() -> int:
            async with other.post(f"{url}/invoke", json=EXAMPLE_BODY) as response:
                await response.read()
                return response.status

        in_flight = asyncio.create_task(invoke())
        await eventually(lambda: _started(llm))
        process.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.3)
        async with pooled.post(f"{url}/invoke", json=EXAMPLE_BODY) as response:
            assert response.status == 503
            assert response.headers["x-plnt-draining"] == "1"
            assert (await response.json())["reason"] == "ShuttingDown"
        assert await in_flight == 200
        assert llm.request_count == 4  # the refused call never reached the LLM
        assert await asyncio.wait_for(process.wait(), timeout=20) == 0
