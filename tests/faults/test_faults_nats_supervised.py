"""``plnt up`` supervises nats-server like the services: a killed server is started again
on its store with back-off, the restart is said on the console and in its log, and the
services resume. ``--nats-cluster 3`` runs three supervised nodes."""

import asyncio
import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from stack_fixtures import start_stack
from stack_support import Client, backend_document, publish_spec, run_document, workflow_named
from test_faults_up_lifecycle import marked_pids, spawn_up, wait_until_gone

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.connection import connect


def read_until(up: "subprocess.Popen[str]", pattern: str, *, timeout_s: float) -> list[str]:
    """Console lines of ``up`` up to the first matching ``pattern``."""
    assert up.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = up.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip())
        if re.search(pattern, line):
            return lines
    raise AssertionError(f"no {pattern!r} within {timeout_s}s: {lines}")


async def deploy(url: str, registry: Path, name: str) -> dict[str, object]:
    """Apply a run and wait until it is Ready; the statuses of every run deployed so far."""
    bus = await Bus.open(url, service="test", wait_for_server=True)
    try:
        client = Client(bus)
        await client.apply(backend_document())
        publish_spec(registry, workflow_named(name))
        await client.apply(run_document(name, registry=registry))
        await client.wait_phase(name, "Ready", timeout_s=30)
        return {
            stored.body["metadata"]["name"]: (stored.body.get("status") or {}).get("phase")
            for stored in await client.store.list("WorkflowRun", "default")
        }
    finally:
        await bus.close()


def test_a_killed_nats_server_is_restarted_on_its_store_and_the_saga_resumes(
    tmp_path: Path, registry: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # started on this (the main) thread: children die with the thread that started them
    stack = start_stack(tmp_path / "stack")
    try:
        asyncio.run(deploy(stack.config.nats_url, registry, "before-kill"))
        (nats,) = stack.nats_nodes()
        os.kill(nats.pid, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while nats.restarts == 0 or nats.process is None:
            assert time.monotonic() < deadline, "nats-server was not restarted"
            time.sleep(0.1)
        phases = asyncio.run(deploy(stack.config.nats_url, registry, "after-kill"))
        assert phases == {"before-kill": "Ready", "after-kill": "Ready"}  # the same store
    finally:
        stack.stop()
    said = capsys.readouterr().out
    assert "nats-server exited with code -9; restarting in 0.5s" in said
    assert "nats-server restarted (pid" in said
    log = nats.log_path.read_text()
    assert "plnt up: exited with code -9; restarting in 0.5s" in log
    assert "plnt up: restarted (pid" in log


def test_plnt_up_with_a_three_node_cluster_restarts_a_killed_node(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    up = spawn_up(tmp_path, mark, "--nats-cluster", "3")
    try:
        lines = read_until(up, "plnt is up", timeout_s=90)
        urls = re.search(r"NATS (\S+), router", lines[-1])
        assert urls is not None, lines
        servers = urls.group(1).split(",")
        assert len(servers) == 3, lines
        replicas = asyncio.run(events_stream_replicas(urls.group(1)))
        assert replicas == 3

        node = next(pid for pid in marked_pids(mark) if is_node(pid, "n2"))
        os.kill(node, signal.SIGKILL)
        said = read_until(up, r"nats-n2 restarted \(pid", timeout_s=30)
        assert any("nats-n2 exited with code -9; restarting in 0.5s" in line for line in said)
        assert asyncio.run(events_stream_replicas(servers[1])) == 3  # the node serves again
    finally:
        up.send_signal(signal.SIGINT)
        up.communicate(timeout=60)
    assert wait_until_gone(mark, timeout_s=10) == []


def is_node(pid: int, name: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(part.endswith(f"/{name}/nats-server.conf".encode()) for part in cmdline)


async def events_stream_replicas(url: str) -> int:
    nc = await connect(url, name="test")
    try:
        js = nc.jetstream(timeout=2)
        deadline = time.monotonic() + 30
        while True:
            try:
                info = await js.stream_info(subjects.STREAM)
                return info.config.num_replicas or 1
            except Exception:  # a node still catching up, or a leader being elected
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
    finally:
        await nc.close()
