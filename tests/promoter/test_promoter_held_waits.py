"""Step holds and the guard window are deadlines re-checked by deferred deliveries, not
held deliveries: a real nats-server, the promoter's own FastStream app and ordered durable
consumer, restarted where a test says so; figures set by the test at the figures port."""

import asyncio
from collections.abc import AsyncIterator

import pytest
from held_kit import (
    CANARY,
    NS,
    STABLE,
    SetFigures,
    epoch,
    held,
    promoter,
    published,
    ready_guarded,
    request,
    saga_of,
    smoke_passed,
    stepping,
    totals,
    until,
)

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.saga import advance_latest_saga
from plnt_common.events import EventType
from plnt_promoter import held_window
from plnt_promoter.adapters.route_table import RouteTable
from plnt_promoter.step_hold import CHECK_S

STEP = held_window.step_wait(1)
QUICK_CHECK_S = 0.25
"""The check interval of the restart tests: a short one, so "within one check" is tight."""
SLACK_S = 0.5
"""What a check may take beyond its deferral on a shared machine (bus round trips)."""
VERDICTS = {EventType.ANALYSIS_PASSED, EventType.ANALYSIS_FAILED}


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    opened = await Bus.open(nats_url, service="test")
    yield opened
    await opened.close()


async def window_taken(bus: Bus, name: str, wait: str = STEP) -> held_window.HeldWindow:
    async def stored() -> bool:
        window = await held(bus, name, wait)
        return window is not None and window.baseline is not None

    await until(stored, timeout_s=10, what=f"{name}'s {wait} window stored with its baseline")
    window = await held(bus, name, wait)
    assert window is not None
    return window


async def gone(bus: Bus, name: str, wait: str) -> bool:
    return await held(bus, name, wait) is None


async def settled(bus: Bus) -> None:
    """Every event the promoter took is acked: nothing deferred, nothing in hand."""

    async def empty() -> bool:
        info = await bus.js.consumer_info(subjects.STREAM, subjects.durable_name("promoter"))
        return info.num_ack_pending == 0 and info.num_pending == 0

    await until(empty, timeout_s=5, what="the promoter's consumer to ack everything")


async def test_fifty_held_steps_leave_the_consumer_free_for_another_runs_promotion(
    bus: Bus, nats_url: str
) -> None:
    figures = SetFigures()
    names = [f"held-{i}" for i in range(50)]
    for name in names:
        await stepping(bus, name, interval="30s")
    await smoke_passed(bus, "other")  # behind all 50 steps in the stream
    async with published(bus) as seen, promoter(nats_url, figures, check_s=CHECK_S):
        await until(
            lambda: seen.of("other", EventType.RUN_READY),
            timeout_s=10,
            what="the other run's smoke.passed answered while 50 steps are held",
        )
        windows = await asyncio.gather(*(held(bus, name, STEP) for name in names))
        # every step still holding: its window stored, no verdict, its canary at 10 %
        assert all(window is not None for window in windows)
        routes = RouteTable(bus.routes)
        entries = await asyncio.gather(*(routes.get(namespace=NS, name=n) for n in names))
        assert {(e.canary.saga_id, e.canary_weight) for e, _ in entries if e and e.canary} == {
            (saga_of(name), 10) for name in names
        }
    counted = seen.count()
    assert counted[EventType.RUN_READY] == 1
    assert not VERDICTS & set(counted), counted
    assert counted[EventType.ROUTE_RESTORED] == 0


async def test_a_promoter_restarted_mid_step_ends_the_step_at_its_original_deadline(
    bus: Bus, nats_url: str
) -> None:
    figures, name = SetFigures(), "resumed-step"
    await stepping(bus, name, interval="3s")
    async with published(bus) as seen:
        async with promoter(nats_url, figures, check_s=QUICK_CHECK_S):
            window = await window_taken(bus, name)
            figures.set(name, {CANARY: totals(30), STABLE: totals(300)})
            await asyncio.sleep(1.2)  # the restart comes 1.2 s into the 3 s step
        async with promoter(nats_url, figures, check_s=QUICK_CHECK_S):
            await until(
                lambda: seen.of(name, EventType.ANALYSIS_PASSED),
                timeout_s=6,
                what="the resumed step's verdict",
            )
            # the check that answered deleted the window (step 2 holds on meanwhile)
            await until(lambda: gone(bus, name, STEP), timeout_s=2, what="step 1's window deleted")
    (passed,) = seen.of(name, EventType.ANALYSIS_PASSED)
    assert seen.of(name, EventType.ANALYSIS_FAILED) == []
    ended_s = epoch(passed.time) - window.started
    assert 3.0 <= ended_s <= 3.0 + QUICK_CHECK_S + SLACK_S, ended_s
    # judged on every call since the stored baseline, before the restart too
    assert passed.payload().figures.canary.invocations == 30


async def test_a_promoter_restarted_mid_guard_judges_the_whole_window_at_its_deadline(
    bus: Bus, nats_url: str
) -> None:
    figures, name = SetFigures(), "resumed-guard"
    ready = await ready_guarded(bus, name, {"window": "4s", "maxErrorPercent": 2, "maxP95Ms": 500})
    async with published(bus) as seen:
        async with promoter(nats_url, figures, check_s=QUICK_CHECK_S):
            window = await window_taken(bus, name, held_window.GUARD)
            # 100 calls between 0.1 and 1 s: never certainly over 500 ms while the window
            # runs, but the whole window's p95 is
            figures.set(name, {CANARY: totals(100, slow=100)})
            await asyncio.sleep(1.2)
        # after the restart, 400 fast calls: alone they would pass
        figures.set(name, {CANARY: totals(500, slow=100)})
        async with promoter(nats_url, figures, check_s=QUICK_CHECK_S):
            await until(
                lambda: seen.of(name, EventType.RUN_REVERTED),
                timeout_s=6,
                what="the resumed guard's revert",
            )
            await until(
                lambda: gone(bus, name, held_window.GUARD),
                timeout_s=2,
                what="the guard's window deleted",
            )
    (reverted,) = seen.of(name, EventType.RUN_REVERTED)
    ended_s = (reverted.time - ready.time).total_seconds()
    assert 4.0 <= ended_s <= 4.0 + QUICK_CHECK_S + SLACK_S, ended_s
    message = reverted.payload().message
    # measured from the stored start (before the restart), on the stored baseline
    judged_s = float(message.removeprefix("guard failed after ").split("s: ")[0])
    deadline_s = epoch(ready.time) + 4.0 - window.started
    assert 0 <= judged_s - deadline_s <= QUICK_CHECK_S + SLACK_S, message
    assert message.endswith("promoted revision p95 775 ms > maxP95Ms 500"), message


async def stepping_held(bus: Bus, name: str) -> None:
    await stepping(bus, name, interval="30s")
    await window_taken(bus, name)


async def test_abort_ends_a_held_step_at_once_and_the_step_ends_at_its_next_check(
    bus: Bus, nats_url: str
) -> None:
    figures, name = SetFigures(), "aborted-step"
    async with published(bus) as seen, promoter(nats_url, figures, check_s=CHECK_S):
        await stepping_held(bus, name)
        _, route_revision = await RouteTable(bus.routes).get(namespace=NS, name=name)
        await request(bus, name, EventType.ABORT_REQUESTED)
        asked = asyncio.get_running_loop().time()
        answered = await until(
            lambda: seen.of(name, EventType.ROUTE_RESTORED), timeout_s=5, what="the abort"
        )
        ended = await until(
            lambda: gone(bus, name, STEP), timeout_s=5, what="the held step's window deleted"
        )
        await settled(bus)
    assert answered - asked < CHECK_S + SLACK_S
    assert ended - asked < CHECK_S + SLACK_S
    (restored,) = seen.of(name, EventType.ROUTE_RESTORED)
    assert restored.data["reason"] == "Aborted"
    assert not VERDICTS & set(seen.count(name))
    entry, revision = await RouteTable(bus.routes).get(namespace=NS, name=name)
    assert entry is not None and entry.canary is None
    assert revision == route_revision + 1  # one route write: the abort's


async def test_promote_full_ends_a_held_step_at_once_and_the_step_ends_at_its_next_check(
    bus: Bus, nats_url: str
) -> None:
    figures, name = SetFigures(), "promoted-step"
    async with published(bus) as seen, promoter(nats_url, figures, check_s=CHECK_S):
        await stepping_held(bus, name)
        await request(bus, name, EventType.PROMOTE_REQUESTED, full=True)
        asked = asyncio.get_running_loop().time()
        answered = await until(
            lambda: seen.of(name, EventType.RUN_READY), timeout_s=5, what="the promotion"
        )
        ended = await until(
            lambda: gone(bus, name, STEP), timeout_s=5, what="the held step's window deleted"
        )
        await settled(bus)
    assert answered - asked < CHECK_S + SLACK_S
    assert ended - asked < CHECK_S + SLACK_S
    counted = seen.count(name)
    assert counted[EventType.RUN_READY] == 1
    assert counted[EventType.ROUTE_RESTORED] == 0
    assert not VERDICTS & set(counted)
    entry, _ = await RouteTable(bus.routes).get(namespace=NS, name=name)
    assert entry is not None and entry.stable is not None and entry.stable.revision == CANARY


async def test_a_failing_canary_is_caught_at_the_next_check_not_at_the_steps_end(
    bus: Bus, nats_url: str
) -> None:
    figures, name = SetFigures(), "failing-step"
    async with published(bus) as seen, promoter(nats_url, figures, check_s=CHECK_S):
        await stepping_held(bus, name)
        figures.set(name, {CANARY: totals(20, errors=20), STABLE: totals(200)})
        broke = asyncio.get_running_loop().time()
        caught = await until(
            lambda: seen.of(name, EventType.ANALYSIS_FAILED), timeout_s=5, what="the verdict"
        )
        await until(
            lambda: seen.of(name, EventType.ROUTE_RESTORED), timeout_s=5, what="the canary out"
        )
        await until(lambda: gone(bus, name, STEP), timeout_s=5, what="the window deleted")
        await settled(bus)
    assert caught - broke < CHECK_S + SLACK_S
    (failed,) = seen.of(name, EventType.ANALYSIS_FAILED)
    assert failed.payload().figures.window_s < CHECK_S + SLACK_S + 1
    assert (
        "canary errors 20 of 20 calls exceed maxErrorPercent 1" in failed.data["figures"]["reason"]
    )
    assert seen.count(name)[EventType.ANALYSIS_PASSED] == 0


async def test_a_newer_generation_ends_a_held_step_at_its_next_check_once(
    bus: Bus, nats_url: str
) -> None:
    figures, name = SetFigures(), "superseded-step"
    async with published(bus) as seen, promoter(nats_url, figures, check_s=CHECK_S):
        await stepping_held(bus, name)
        await advance_latest_saga(bus, NS, name, f"{NS}.{name}.3.1")  # the watcher's step
        superseded = asyncio.get_running_loop().time()
        ended = await until(
            lambda: gone(bus, name, STEP), timeout_s=5, what="the held step's window deleted"
        )
        await settled(bus)
    assert ended - superseded < CHECK_S + SLACK_S
    (restored,) = seen.of(name, EventType.ROUTE_RESTORED)
    assert (restored.sagaid, restored.data["reason"]) == (saga_of(name), "Superseded")
    assert not VERDICTS & set(seen.count(name))


async def test_a_rollback_during_the_guard_reverts_at_once_and_ends_the_guard_at_its_next_check(
    bus: Bus, nats_url: str
) -> None:
    figures, name = SetFigures(), "rolled-back-guard"
    await ready_guarded(bus, name, {"window": "30s", "maxErrorPercent": 2})
    async with published(bus) as seen, promoter(nats_url, figures, check_s=CHECK_S):
        await window_taken(bus, name, held_window.GUARD)
        await request(bus, name, EventType.ROLLBACK_REQUESTED)
        asked = asyncio.get_running_loop().time()
        reverted = await until(
            lambda: seen.of(name, EventType.RUN_REVERTED), timeout_s=5, what="the revert"
        )
        ended = await until(
            lambda: gone(bus, name, held_window.GUARD), timeout_s=5, what="the guard ended"
        )
        await settled(bus)
    assert reverted - asked < CHECK_S + SLACK_S
    assert ended - asked < CHECK_S + SLACK_S
    (only,) = seen.of(name, EventType.RUN_REVERTED)
    assert only.data["reason"] == "RollbackRequested"
