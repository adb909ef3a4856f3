"""Supersession, killed services and replay, against the real embedded stack."""

import asyncio
import os
import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from stack_support import (
    Client,
    delayed_endpoint,
    invoke,
    publish_spec,
    run_document,
    service_process,
    workflow_named,
)

from plnt_cli.commands import Session, replay
from plnt_cli.supervisor import Supervisor
from plnt_common.events import EventType
from plnt_testkit.projections import stored_projections


@pytest.fixture
async def slow_upstream() -> AsyncIterator[str]:
    """Answers after 300 ms: keeps a saga's smoke step in flight."""
    async with delayed_endpoint(0.3) as url:
        yield url


async def test_a_spec_change_mid_saga_supersedes_it_and_only_the_newest_generation_is_promoted(
    client: Client, registry: Path, slow_upstream: str
) -> None:
    steps = [{"id": "slow", "tool": "http.request", "with": {"url": slow_upstream}}]
    publish_spec(registry, workflow_named("superseded", steps=steps))
    first = run_document("superseded", registry=registry, smoke_invocations=12)
    await client.apply(first)
    await client.wait_for(
        "superseded",
        lambda body: bool(body and (body.get("status") or {}).get("phase") == "Smoking"),
        what="to be Smoking",
    )
    second = run_document("superseded", registry=registry, smoke_invocations=12, traffic_percent=20)
    assert await client.apply(second) == "configured"

    body = await client.wait_phase("superseded", "Ready", generation=2)
    assert body["status"]["revision"] == "1.0.0-g2"
    events = await client.events("superseded")
    first_saga = [e for e in events if e.sagaid == "default.superseded.1.1"]
    assert EventType.RUN_READY not in [e.event_type for e in first_saga]
    terminals = [e for e in first_saga if e.event_type.is_terminal]
    assert len(terminals) == 1
    assert terminals[0].data["reason"] == "Superseded"
    for _ in range(50):
        keys = await client.release_keys("superseded")
        if all(k.endswith("superseded-g2") for k in keys):
            break
        await asyncio.sleep(0.1)
    history = [
        (e.sagaid, e.event_type.value, e.data.get("message", ""))
        for e in await client.events("superseded")
    ]
    assert keys and all(k.endswith("superseded-g2") for k in keys), (keys, history)


@pytest.mark.parametrize(
    "service", ["watcher", "puller", "installer", "smoke", "promoter", "local-backend"]
)
async def test_a_service_killed_right_after_apply_is_restarted_and_its_backlog_completes(
    client: Client, registry: Path, stack: Supervisor, service: str
) -> None:
    """Killed before its step came: restart and backlog. A kill inside a step is
    tests/faults/test_faults_crash_in_step.py."""
    name = f"killed-{service}"
    publish_spec(registry, workflow_named(name))
    target = await service_process(stack, service)
    await client.apply(run_document(name, registry=registry))
    os.kill(target.pid, signal.SIGKILL)

    try:
        body = await client.wait_phase(name, "Ready", timeout_s=90)
    except AssertionError as exc:
        # once under a fully loaded suite the restarted watcher's projection stayed behind
        # the stream: the log says whether its consumer was pinned again, and when
        log = stack.log_dir / f"{service}.log"
        tail = log.read_text().splitlines()[-40:] if log.exists() else ["(no log)"]
        raise AssertionError(f"{exc}\n--- {log} (last 40 lines) ---\n" + "\n".join(tail)) from None
    code, revision, _ = await invoke(body["status"]["endpoint"], {"review": "fine"})
    assert (code, revision) == (200, "1.0.0-g1")
    terminals = Counter(e.sagaid for e in await client.events(name) if e.event_type.is_terminal)
    assert terminals == {f"default.{name}.1.1": 1}
    assert target.restarts >= 1


async def test_replay_rebuilds_the_same_projection_from_the_stream(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    for name in ("replay-a", "replay-b"):
        publish_spec(registry, workflow_named(name))
        await client.apply(run_document(name, registry=registry))
    for name in ("replay-a", "replay-b"):
        await client.wait_phase(name, "Ready")
    await asyncio.sleep(0.5)  # let the watcher finish writing
    before = await stored_projections(client.bus.nc)
    assert {"default.replay-a", "default.replay-b"} <= set(before)
    for key in before:
        await client.bus.runs.purge(key)

    session = await Session.open(stack.config.nats_url)
    try:
        stats = await replay(session)
    finally:
        await session.close()
    assert stats.events > 0
    assert await stored_projections(client.bus.nc) == before
