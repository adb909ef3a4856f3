"""The stepped canary on the real stack: live load through the router, every service its
own process, the promoter judging the router's published figures."""

import asyncio
import contextlib
import copy
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from canary_load import Load, parking_only_upstream
from nats.js.errors import KeyDeletedError, KeyNotFoundError
from stack_support import Client, publish_spec, run_document, service_process, workflow_named

from plnt_cli.commands import Session, replay
from plnt_cli.supervisor import Supervisor
from plnt_common.events import EventType
from plnt_testkit.polling import recorded_changes
from plnt_testkit.projections import stored_projections

STABLE, CANARY = "1.0.0-g1", "2.0.0-g2"


def stepped(
    document: dict[str, Any], steps: list[int], interval: str, **analysis: Any
) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    changed["spec"]["workflow"]["ref"] = changed["spec"]["workflow"]["ref"].replace(
        "@1.0.0", "@2.0.0"
    )
    changed["spec"]["canary"].update(
        steps=steps,
        stepInterval=interval,
        analysis={"minInvocations": 20, "maxErrorPercent": 1, "maxP95Ms": 5000, **analysis},
    )
    return changed


async def ready_stable(
    client: Client, registry: Path, name: str, canary_steps: Any = None
) -> dict[str, Any]:
    """Version 1.0.0 Ready and serving; version 2.0.0 published for the canary."""
    publish_spec(registry, workflow_named(name))
    publish_spec(registry, workflow_named(name, "2.0.0", steps=canary_steps))
    document = run_document(name, registry=registry)
    await client.apply(document)
    await client.wait_phase(name, "Ready")
    return document


@dataclass(frozen=True)
class Seen:
    at: float
    phase: str
    step: str
    weight: int


def watching(client: Client, name: str) -> contextlib.AbstractAsyncContextManager[list[Seen]]:
    """Every change of the run's phase, step and weight, with when it was seen."""

    async def read() -> Seen:
        status = await client.status(name)
        canary = status.get("canary") or {}
        return Seen(
            time.monotonic(),
            status.get("phase", ""),
            canary.get("step", ""),
            canary.get("trafficPercent", 0),
        )

    def same(last: Seen, now: Seen) -> bool:
        return (last.phase, last.step, last.weight) == (now.phase, now.step, now.weight)

    return recorded_changes(read, same=same)


def step_spans(seen: list[Seen]) -> dict[str, tuple[float, float, int]]:
    """(first seen, last seen, weight) of each Progressing step."""
    spans: dict[str, tuple[float, float, int]] = {}
    for current, following in zip(seen, [*seen[1:], None], strict=True):
        if current.phase == "Progressing" and current.step:
            end = following.at if following else time.monotonic()
            start = spans[current.step][0] if current.step in spans else current.at
            spans[current.step] = (start, end, current.weight)
    return spans


async def test_a_good_canary_walks_every_step_under_live_load_with_the_split_each_step_names(
    client: Client, registry: Path
) -> None:
    name = "steps-good"
    document = await ready_stable(client, registry, name)
    endpoint = (await client.status(name))["endpoint"]
    load = Load(endpoint, concurrency=6)
    async with load.running(), watching(client, name) as seen:
        await client.apply(stepped(document, [10, 50], "6s"))
        body = await client.wait_phase(name, "Ready", generation=2, timeout_s=90)
    status = body["status"]
    assert status["revision"] == CANARY
    analysis = status["analysis"]
    assert (analysis["step"], analysis["passed"]) == ("2/2", True)
    assert analysis["canary"]["invocations"] >= 20 and analysis["stable"]["invocations"] >= 20

    spans = step_spans(seen)
    assert [(step, weight) for step, (_, _, weight) in spans.items()] == [("1/2", 10), ("2/2", 50)]
    for step, (start, end, weight) in spans.items():
        # the router applies a weight a moment after the status shows it: skip the edges
        calls = load.between(start + 0.3, end - 0.3)
        served = [c for c in calls if c.status == 200]
        assert len(served) == len(calls), f"step {step}: failed calls {len(calls) - len(served)}"
        share = 100 * sum(c.revision == CANARY for c in calls) / len(calls)
        assert len(calls) >= 1000, f"step {step}: only {len(calls)} calls"
        assert abs(share - weight) <= 2, f"step {step}: {share:.1f}% on the canary, not {weight}%"

    events = [e for e in await client.events(name) if e.sagaid == f"default.{name}.2.1"]
    kinds = [(e.event_type, e.data.get("step")) for e in events]
    assert kinds[-5:] == [
        (EventType.CANARY_STEPPED, 1),
        (EventType.ANALYSIS_PASSED, 1),
        (EventType.CANARY_STEPPED, 2),
        (EventType.ANALYSIS_PASSED, 2),
        (EventType.RUN_READY, None),
    ]


async def test_a_canary_failing_live_inputs_is_rolled_back_in_its_first_step_while_stable_serves(
    client: Client, registry: Path
) -> None:
    name = "steps-bad"
    async with parking_only_upstream() as upstream:
        steps = [{"id": "judge", "tool": "http.request", "with": {"url": upstream}}]
        document = await ready_stable(client, registry, name, canary_steps=steps)
        endpoint = (await client.status(name))["endpoint"]
        load = Load(endpoint, concurrency=4)
        async with load.running():
            await client.apply(stepped(document, [10, 50], "30s"))
            body = await client.wait_phase(name, "RolledBack", generation=2, timeout_s=60)
            settled = time.monotonic()
            await asyncio.sleep(1.0)
    status = body["status"]
    assert "step 1/2 analysis failed" in status["message"]
    assert "maxErrorPercent 1" in status["message"]
    assert status["message"].endswith(f"{STABLE} keeps serving")
    assert status["revision"] == STABLE
    failed = status["analysis"]
    assert (failed["step"], failed["passed"]) == ("1/2", False)
    assert failed["canary"]["errorPercent"] == 100.0
    assert failed["stable"]["errorPercent"] == 0.0

    events = [e for e in await client.events(name) if e.sagaid == f"default.{name}.2.1"]
    by_kind = {e.event_type: e for e in events}
    assert EventType.ANALYSIS_PASSED not in by_kind
    assert by_kind[EventType.RUN_ROLLED_BACK].data["reason"] == "AnalysisFailed"
    held_s = (
        by_kind[EventType.ANALYSIS_FAILED].time - by_kind[EventType.CANARY_STEPPED].time
    ).total_seconds()
    assert held_s < 10, f"the first 30 s step was held {held_s:.1f}s before failing"
    # the stable served every call it got, before, during and after the canary
    assert all(c.status == 200 for c in load.calls if c.revision == STABLE)
    assert all(c.revision == STABLE for c in load.calls if c.started > settled)
    assert {c.status for c in load.calls if c.revision == CANARY} == {500}


async def test_a_step_without_enough_traffic_fails_after_its_bounded_wait(
    client: Client, registry: Path
) -> None:
    name = "steps-quiet"
    document = await ready_stable(client, registry, name)
    await client.apply(stepped(document, [50], "1s", minInvocations=20))
    body = await client.wait_phase(name, "RolledBack", generation=2, timeout_s=60)
    message = body["status"]["message"]
    assert "step 1/1 analysis failed: not enough traffic: 0 canary calls in " in message
    assert "minInvocations 20" in message
    events = [e for e in await client.events(name) if e.sagaid == f"default.{name}.2.1"]
    times = {e.event_type: e.time for e in events}
    waited_s = (times[EventType.ANALYSIS_FAILED] - times[EventType.CANARY_STEPPED]).total_seconds()
    assert 2.0 <= waited_s < 6.0  # the interval, one more for traffic, then at once


async def wait_progressing(client: Client, name: str) -> None:
    await client.wait_for(
        name,
        lambda body: bool(body and (body.get("status") or {}).get("phase") == "Progressing"),
        what="to be Progressing",
    )


async def test_a_spec_change_while_progressing_supersedes_the_stepped_canary(
    client: Client, registry: Path
) -> None:
    name = "steps-changed"
    document = await ready_stable(client, registry, name)
    await client.apply(stepped(document, [10], "30s"))
    await wait_progressing(client, name)
    third = copy.deepcopy(document)
    third["spec"]["canary"]["trafficPercent"] = 20
    await client.apply(third)
    body = await client.wait_phase(name, "Ready", generation=3, timeout_s=60)
    assert body["status"]["revision"] == "1.0.0-g3"
    # the superseded saga ends on its own clock: its held step sees the newer saga at its
    # next tick, so its terminal may come after the newer saga is Ready
    for _ in range(150):
        second = [e for e in await client.events(name) if e.sagaid == f"default.{name}.2.1"]
        terminals = [e for e in second if e.event_type.is_terminal]
        if terminals:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)  # a second, wrong terminal would follow the first at once
    second = [e for e in await client.events(name) if e.sagaid == f"default.{name}.2.1"]
    terminals = [e for e in second if e.event_type.is_terminal]
    assert [(t.event_type, t.data["reason"]) for t in terminals] == [
        (EventType.RUN_ROLLED_BACK, "Superseded")
    ]
    assert EventType.ANALYSIS_PASSED not in {e.event_type for e in second}


async def route_of(client: Client, name: str) -> bytes | None:
    try:
        entry = await client.bus.routes.get(f"default.{name}")
    except (KeyNotFoundError, KeyDeletedError):
        return None
    return entry.value or None


async def test_a_delete_while_progressing_removes_the_run(client: Client, registry: Path) -> None:
    name = "steps-deleted"
    document = await ready_stable(client, registry, name)
    await client.apply(stepped(document, [10], "30s"))
    await wait_progressing(client, name)
    started = time.monotonic()
    assert await client.store.delete("WorkflowRun", "default", name) == "deleting"
    await client.wait_for(name, lambda body: body is None, timeout_s=30, what="to disappear")
    for _ in range(100):  # the route goes too, not only when the 30 s step would have ended
        if await route_of(client, name) is None:
            break
        await asyncio.sleep(0.1)
    assert await route_of(client, name) is None
    assert time.monotonic() - started < 15
    assert await client.release_keys(name) == []
    events = await client.events(name)
    assert [e.event_type for e in events].count(EventType.RUN_READY) == 1  # the first rollout's
    stepped_saga = [e for e in events if e.sagaid == f"default.{name}.2.1"]
    terminals = [e for e in stepped_saga if e.event_type.is_terminal]
    assert [t.data["reason"] for t in terminals] == ["Superseded"]
    deletion = next(e for e in events if e.event_type is EventType.RUN_DELETED).sagaid
    assert [e.event_type for e in events if e.sagaid == deletion][-1] == EventType.RUN_REMOVED


async def test_replay_rebuilds_the_projection_of_stepped_rollouts(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    await asyncio.sleep(0.5)  # the runs above are settled; let the watcher finish writing
    before = await stored_projections(client.bus.nc)
    assert any(p.status.analysis.step for p in before.values())
    for key in before:
        await client.bus.runs.purge(key)
    session = await Session.open(stack.config.nats_url)
    try:
        await replay(session)
    finally:
        await session.close()
    assert await stored_projections(client.bus.nc) == before


SLOW_TO_RECOVER = {"promoter"}
"""A promoter killed during a step's check: that check's message comes back only after the
consumer's 30 s ack wait (a check between two is a delayed redelivery and resumes at once)."""
QUICK_KILLS = {"promoter", "router"}
"""In the default suite: the two services a held step depends on; the rest are slow."""


@pytest.mark.parametrize(
    "service",
    [
        pytest.param(service, marks=[pytest.mark.slow] if service not in QUICK_KILLS else [])
        for service in (
            "promoter",
            "router",
            "watcher",
            "puller",
            "installer",
            "smoke",
            "local-backend",
        )
    ],
)
async def test_a_service_killed_while_progressing_still_ends_the_saga_once_in_its_true_state(
    client: Client, registry: Path, stack: Supervisor, service: str
) -> None:
    name = f"steps-kill-{service}"
    document = await ready_stable(client, registry, name)
    endpoint = (await client.status(name))["endpoint"]
    target = await service_process(stack, service)
    load = Load(endpoint, concurrency=2, pause_s=0.02)
    async with load.running():
        await client.apply(stepped(document, [20, 50], "5s", minInvocations=5))
        await wait_progressing(client, name)
        os.kill(target.pid, signal.SIGKILL)
        timeout_s = 90 if service in SLOW_TO_RECOVER else 45
        body = await client.wait_phase(name, "Ready", generation=2, timeout_s=timeout_s)
    assert body["status"]["revision"] == CANARY
    events = [e for e in await client.events(name) if e.sagaid == f"default.{name}.2.1"]
    assert [e.event_type for e in events if e.event_type.is_terminal] == [EventType.RUN_READY]
    verdicts = [(e.event_type, e.data["step"]) for e in events if "analysis" in e.type]
    assert verdicts == [(EventType.ANALYSIS_PASSED, 1), (EventType.ANALYSIS_PASSED, 2)]
    assert target.restarts >= 1
