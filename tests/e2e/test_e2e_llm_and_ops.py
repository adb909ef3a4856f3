"""Runner steps calling a real OpenAI-compatible server, metrics, and `plnt up` start/stop."""

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from stack_fixtures import start_stack
from stack_support import Client, invoke, publish_spec, run_document, workflow_named

from plnt_cli.supervisor import Supervisor
from plnt_common.bus.bus import Bus
from plnt_common.nats_server import free_ports
from plnt_testkit.fake_llm import FakeLLM
from plnt_testkit.terminal import sigint_default

API_KEY = "sk-plnt-e2e"


@pytest.fixture(scope="module")
def fake_llm() -> Iterator[FakeLLM]:
    """A fake LLM on its own event loop thread, so it outlives each test's loop."""
    loop = asyncio.new_event_loop()
    llm = FakeLLM(api_key=API_KEY, reply="We appreciate your review and will fix the parking.")
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(llm.__aenter__(), loop).result(timeout=10)
    yield llm
    asyncio.run_coroutine_threadsafe(llm.__aexit__(None, None, None), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)


@pytest.fixture(scope="module")
def stack_ports() -> list[int]:
    """NATS's, the router's and the installer's metrics port, chosen together."""
    return free_ports(3)


@pytest.fixture(scope="module")
def metrics_port(stack_ports: list[int]) -> int:
    return stack_ports[2]


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, stack_ports: list[int], metrics_port: int
) -> Iterator[Supervisor]:
    env = {"PLNT_E2E_LLM_KEY": API_KEY, "PLNT_INSTALLER_METRICS_PORT": str(metrics_port)}
    nats_port, router_port = stack_ports[:2]
    supervisor = start_stack(
        tmp_path_factory.mktemp("llm"), env=env, ports=(nats_port, router_port)
    )
    yield supervisor
    supervisor.stop()


@pytest.fixture
async def client(stack: Supervisor, fake_llm: FakeLLM) -> AsyncIterator[Client]:
    bus = await Bus.open(stack.config.nats_url, service="test", wait_for_server=True)
    test_client = Client(bus)
    await test_client.apply(
        {
            "apiVersion": "plnt.work/v1",
            "kind": "PlntBackend",
            "metadata": {"name": "llm-cluster"},
            "spec": {
                "type": "local",
                "gpuClasses": {
                    "nvidia.com/h100": {"resourceName": "nvidia.com/gpu", "capacity": 8}
                },
                "llm": {
                    "baseUrl": fake_llm.base_url,
                    "model": "fake-model",
                    "apiKeyEnv": "PLNT_E2E_LLM_KEY",
                },
            },
        }
    )
    yield test_client
    await bus.close()


async def test_runner_steps_call_the_backends_llm_with_its_key(
    client: Client, registry: Path, fake_llm: FakeLLM
) -> None:
    publish_spec(registry, workflow_named("llm-run"))
    await client.apply(run_document("llm-run", registry=registry, backend="llm-cluster"))
    body = await client.wait_phase("llm-run", "Ready")
    before = fake_llm.request_count
    code, _, answer = await invoke(
        body["status"]["endpoint"], {"review": "Parking was a nightmare"}
    )
    assert code == 200
    assert answer["provider"] == "openai"
    assert answer["output"]["reply"] == "We appreciate your review and will fix the parking."
    assert fake_llm.request_count > before
    assert all(r.authorization == f"Bearer {API_KEY}" for r in fake_llm.received)
    assert {r.body["model"] for r in fake_llm.received} == {"fake-model"}


async def test_saga_services_serve_prometheus_metrics(
    client: Client, registry: Path, metrics_port: int
) -> None:
    publish_spec(registry, workflow_named("metered"))
    await client.apply(run_document("metered", registry=registry, backend="llm-cluster"))
    await client.wait_phase("metered", "Ready")
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{metrics_port}/metrics") as response,
    ):
        text = await response.text()
    assert response.status == 200
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    installer = ("service", "installer")
    # the installer's install step, as the consumer timed it, counted it and its effect
    step = (("event", "spec.pulled"), ("outcome", "ok"), installer)
    assert samples[("plnt_saga_step_duration_seconds_count", step)] >= 1
    assert samples[("plnt_saga_step_runs_total", (installer, ("step", "spec.pulled")))] >= 1
    effect = (("effect", "canary_install"), installer)
    assert samples[("plnt_side_effects_total", effect)] >= 1


def test_plnt_up_reports_its_ports_and_ctrl_c_stops_every_process(tmp_path: Path) -> None:
    env = dict(os.environ, PLNT_HOME=str(tmp_path / "home"))
    env.pop("PLNT_NATS_URL", None)
    nats_port, router_port = free_ports(2)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "plnt_cli",
            "up",
            "--data-dir",
            str(tmp_path / "data"),
            "--nats-port",
            str(nats_port),
            "--router-port",
            str(router_port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        preexec_fn=sigint_default,  # Ctrl-C reaches it however the suite was started
    )
    assert process.stdout is not None
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        lines.append(line)
        if "plnt is up" in line:
            break
    assert any(f"NATS nats://127.0.0.1:{nats_port}" in line for line in lines), lines
    found = subprocess.run(
        [sys.executable, "-m", "plnt_cli", "get", "backends"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert found.returncode == 0, found.stderr
    assert "No plntbackends found" in found.stdout
    children = child_pids(process.pid)
    assert len(children) >= 8  # nats-server and seven services

    process.send_signal(signal.SIGINT)
    rest, _ = process.communicate(timeout=60)
    assert process.returncode == 0, rest
    assert "stopped" in rest
    time.sleep(0.5)
    assert [pid for pid in children if alive(pid)] == []
    assert not (tmp_path / "home" / "up.json").exists()


def child_pids(parent: int) -> list[int]:
    out = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(parent)], capture_output=True, text=True
    )
    return [int(p) for p in out.stdout.split()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie awaiting its reaper is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
