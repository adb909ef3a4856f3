"""The post-promotion guard on the real stack: a revision that passes its smoke test but
fails live calls is reverted to the kept previous revision the moment its budget breaks,
and a `plnt rollback` during the guard's hold ends it at once."""

import asyncio
import time
from pathlib import Path

from canary_load import Load, parking_only_upstream
from rollback_support import NEXT, STABLE, second_version, two_versions
from stack_support import Client
from test_e2e_canary_steps import ready_stable
from test_e2e_manual_gate import plnt_process

from plnt_cli.supervisor import Supervisor
from plnt_common.events import EventType


async def test_the_guard_reverts_a_revision_failing_live_calls_after_promotion(
    client: Client, registry: Path
) -> None:
    name = "guarded"
    async with parking_only_upstream() as upstream:
        steps = [{"id": "judge", "tool": "http.request", "with": {"url": upstream}}]
        document = await ready_stable(client, registry, name, canary_steps=steps)
        endpoint = (await client.status(name))["endpoint"]
        guarded = second_version(
            document,
            guard={"window": "3s", "maxErrorPercent": 2},
            rollback={"keepPreviousFor": "10s"},
        )
        load = Load(endpoint, concurrency=4)
        async with load.running():
            await client.apply(guarded)
            body = await client.wait_phase(name, "Reverted", generation=2, timeout_s=60)
            settled = time.monotonic()
            await asyncio.sleep(0.5)
    status = body["status"]
    assert status["revision"] == STABLE
    assert status["message"].startswith(f"reverted {NEXT} to {STABLE}: guard failed after ")
    assert "maxErrorPercent 2" in status["message"]
    events = await client.events(name)
    times = {(e.sagaid, e.event_type): e.time for e in events}
    ready = times[(f"default.{name}.2.1", EventType.RUN_READY)]
    reverted = times[(f"default.{name}.2.2", EventType.RUN_REVERTED)]
    assert (reverted - ready).total_seconds() < 2.5  # the moment it broke, not the window's end
    assert (
        next(e for e in events if e.event_type is EventType.RUN_REVERTED).data["reason"]
        == "GuardFailed"
    )
    assert all(c.revision == STABLE for c in load.calls if c.started > settled)
    assert {c.status for c in load.calls if c.revision == NEXT} == {500}


async def test_a_rollback_during_the_guard_ends_it_and_reverts_at_once(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    name = "guarded-rollback"
    await two_versions(
        client,
        registry,
        name,
        guard={"window": "30s"},
        rollback={"keepPreviousFor": "60s"},
    )
    started = time.monotonic()
    code, out, err = await plnt_process(stack, "rollback", name)
    assert code == 0, (out, err)
    assert time.monotonic() - started < 10  # not behind the guard's 30 s hold
    events = await client.events(name)
    reverted = next(e for e in events if e.event_type is EventType.RUN_REVERTED)
    assert (reverted.sagaid, reverted.data["reason"]) == (
        f"default.{name}.2.2",
        "RollbackRequested",
    )
    assert [e.sagaid for e in events if e.event_type.is_terminal].count(f"default.{name}.2.2") == 1
