"""The revert against a real nats-server: a new attempt of the Ready saga's generation
recorded as the run's latest saga, one route write back to the kept revision, one
``run.reverted``; and nothing at all when nothing is kept."""

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, cast

import pytest
import structlog
from nats.aio.msg import Msg
from redelivery import until_answered
from test_promoter_guard import GrowingFigures, calls

from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.bus.saga import advance_latest_saga, latest_saga
from plnt_common.events import (
    CanaryInstalled,
    CanaryRef,
    Envelope,
    EventType,
    OperatorRequest,
    RunReady,
    RunSnapshot,
    new_event,
)
from plnt_common.releases import ObservedRelease, ReleasePhase, observed_key, release_name
from plnt_common.resources import WorkflowRunSpec
from plnt_common.routes import RouteEntry, RouteTarget
from plnt_promoter import guard, revert
from plnt_promoter.adapters.route_table import RouteTable

NS, NAME = "default", "reverting"
READY_SAGA, REVERT_SAGA = f"{NS}.{NAME}.2.1", f"{NS}.{NAME}.2.2"
PREVIOUS, PROMOTED = "1.0.0-g1", "2.0.0-g2"
KEPT_URL = "http://127.0.0.1:39001"


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    opened = await Bus.open(nats_url, service="test")
    yield opened
    await opened.close()


def saga_event(kind: EventType, data: Any, sagaid: str = READY_SAGA) -> Envelope:
    return new_event(
        kind, data, namespace=NS, name=NAME, sagaid=sagaid, generation=2, source="test"
    )


async def ready_run(
    bus: Bus, *, keep: str | None, ready_age_s: float = 0.0, guard: dict[str, Any] | None = None
) -> RouteTable:
    """Generation 2 Ready on PROMOTED, PREVIOUS observed serving; its spec keeps ``keep``."""
    spec = WorkflowRunSpec.model_validate(
        {
            "workflow": {"ref": f"{NAME}@2.0.0", "registry": "file:///r"},
            "backend": {"cluster": "local"},
            "rollback": {"keepPreviousFor": keep} if keep else {},
            **({"guard": guard} if guard else {}),
        }
    )
    canary = CanaryRef(
        revision=PROMOTED, release=release_name(NS, NAME, 2), url="http://127.0.0.1:39002"
    )
    run = RunSnapshot(namespace=NS, name=NAME, generation=2, spec=spec)
    await advance_latest_saga(bus, NS, NAME, READY_SAGA)
    await bus.publish(
        saga_event(EventType.CANARY_INSTALLED, CanaryInstalled(run=run, canary=canary))
    )
    ready = saga_event(
        EventType.RUN_READY,
        RunReady(revision=PROMOTED, endpoint="http://router/x", previous_revision=PREVIOUS),
    )
    await bus.publish_terminal(
        ready.model_copy(update={"time": ready.time - timedelta(seconds=ready_age_s)})
    )
    kept = ObservedRelease(
        namespace=NS,
        release=release_name(NS, NAME, 1),
        revision=PREVIOUS,
        saga_id=f"{NS}.{NAME}.1.1",
        phase=ReleasePhase.READY,
        url=KEPT_URL,
    )
    await bus.releases.put(observed_key(NS, kept.release), kept.model_dump_json().encode())
    routes = RouteTable(bus.routes)
    stable = RouteTarget(revision=PROMOTED, url=canary.url, saga_id=READY_SAGA)
    await routes.update(
        namespace=NS, name=NAME, change=lambda _: RouteEntry(namespace=NS, name=NAME, stable=stable)
    )
    return routes


async def request(bus: Bus, routes: RouteTable) -> None:
    await revert.rollback(
        bus, routes, saga_event(EventType.ROLLBACK_REQUESTED, OperatorRequest(by="test"))
    )


async def test_a_rollback_is_a_new_attempt_moving_the_route_back_once(bus: Bus) -> None:
    routes = await ready_run(bus, keep="10s")
    await request(bus, routes)
    await request(bus, routes)  # a redelivery redoes nothing

    entry, route_revision = await routes.get(namespace=NS, name=NAME)
    assert entry is not None and entry.stable is not None
    assert (entry.stable.revision, entry.stable.url, entry.canary) == (PREVIOUS, KEPT_URL, None)
    assert route_revision == 2  # the route as the run left it, then one write
    assert (await latest_saga(bus, NS, NAME))[0] == REVERT_SAGA
    claim = await bus.terminal_claim(REVERT_SAGA)
    assert claim is not None and claim.event is not None
    assert claim.event.event_type is EventType.RUN_REVERTED
    assert claim.event.data == {
        "revision": PREVIOUS,
        "reverted_revision": PROMOTED,
        "reason": "RollbackRequested",
        "message": "rollback requested by test",
    }
    ready_claim = await bus.terminal_claim(READY_SAGA)
    assert ready_claim is not None and ready_claim.event_type == EventType.RUN_READY.value


@pytest.mark.parametrize(
    ("keep", "age_s"),
    [pytest.param(None, 0.0, id="nothing-kept"), pytest.param("2s", 3.0, id="window-ended")],
)
async def test_a_rollback_with_nothing_kept_changes_nothing(
    bus: Bus, keep: str | None, age_s: float
) -> None:
    routes = await ready_run(bus, keep=keep, ready_age_s=age_s)
    await request(bus, routes)
    entry, route_revision = await routes.get(namespace=NS, name=NAME)
    assert entry is not None and entry.stable is not None
    assert (entry.stable.revision, route_revision) == (PROMOTED, 1)
    assert (await latest_saga(bus, NS, NAME))[0] == READY_SAGA
    assert await bus.terminal_claim(REVERT_SAGA) is None


async def test_a_rollback_after_a_newer_saga_changes_nothing(bus: Bus) -> None:
    routes = await ready_run(bus, keep="10s")
    await advance_latest_saga(bus, NS, NAME, f"{NS}.{NAME}.3.1")
    await request(bus, routes)
    entry, _ = await routes.get(namespace=NS, name=NAME)
    assert entry is not None and entry.stable is not None and entry.stable.revision == PROMOTED
    assert await bus.terminal_claim(REVERT_SAGA) is None


async def guard_ready(bus: Bus, routes: RouteTable, figures: GrowingFigures) -> None:
    """The promoter's guard on the Ready saga's run.ready, as the claim holds it, checked
    every 50 ms (each check a delivery the one before deferred) until it answers."""
    claim = await bus.terminal_claim(READY_SAGA)
    assert claim is not None and claim.event is not None
    ready = claim.event
    await until_answered(
        lambda delivery: guard.guard_promotion(bus, routes, figures, ready, delivery, check_s=0.05)
    )


async def test_the_guard_reverts_the_moment_a_budget_is_broken(bus: Bus) -> None:
    routes = await ready_run(bus, keep="10s", guard={"window": "5s", "maxErrorPercent": 2})
    failing = GrowingFigures(PROMOTED, calls(10, errors=10))
    started = time.monotonic()
    with structlog.testing.capture_logs() as logs:
        await asyncio.wait_for(guard_ready(bus, routes, failing), timeout=2)
    assert time.monotonic() - started < 0.9  # the second reading, one 50 ms check later
    claim = await bus.terminal_claim(REVERT_SAGA)
    assert claim is not None and claim.event is not None
    assert claim.event.data["reason"] == "GuardFailed"
    assert claim.event.data["message"].startswith("guard failed after ")
    assert "maxErrorPercent 2" in claim.event.data["message"]
    assert failing.asked == {(NS, NAME)}
    watching, failed = logged(logs, "guard.watching"), logged(logs, "guard.failed")
    assert watching["revision"] == PROMOTED and 4.5 < watching["window_s"] <= 5
    assert isinstance(watching["window_s"], float)
    assert watching["window_s"] == round(watching["window_s"], 3)
    assert (failed["revision"], failed["reason"]) == (
        PROMOTED,
        claim.event.data["message"].split(": ", 1)[1],
    )


async def test_a_guard_delivered_after_its_window_passes_at_once(bus: Bus) -> None:
    guarded = {"window": "2s", "maxErrorPercent": 2}
    routes = await ready_run(bus, keep="10s", ready_age_s=3, guard=guarded)
    failing = GrowingFigures(PROMOTED, calls(10, errors=10))
    with structlog.testing.capture_logs() as logs:
        await asyncio.wait_for(guard_ready(bus, routes, failing), timeout=0.5)
    assert failing.reads == 0
    assert logged(logs, "guard.window_passed")["revision"] == PROMOTED
    assert await bus.terminal_claim(REVERT_SAGA) is None


async def test_a_guard_delivered_inside_its_window_judges_what_is_left(bus: Bus) -> None:
    guarded = {"window": "2s", "maxErrorPercent": 2}
    routes = await ready_run(bus, keep="10s", ready_age_s=1.5, guard=guarded)
    quiet = GrowingFigures(PREVIOUS, calls(10))
    started = time.monotonic()
    with structlog.testing.capture_logs() as logs:
        await guard_ready(bus, routes, quiet)
    assert 0.3 <= time.monotonic() - started < 1.2
    assert await bus.terminal_claim(REVERT_SAGA) is None
    assert logged(logs, guard.NO_TRAFFIC)["revision"] == PROMOTED


async def test_a_promoted_revision_that_keeps_its_budgets_passes_the_guard(bus: Bus) -> None:
    routes = await ready_run(bus, keep="10s", guard={"window": "500ms", "maxErrorPercent": 2})
    healthy = GrowingFigures(PROMOTED, calls(10))
    with structlog.testing.capture_logs() as logs:
        await asyncio.wait_for(guard_ready(bus, routes, healthy), timeout=2)
    assert await bus.terminal_claim(REVERT_SAGA) is None
    assert logged(logs, "guard.passed")["revision"] == PROMOTED
    assert not [line for line in logs if line["event"] == guard.NO_TRAFFIC]


async def test_a_newer_saga_ends_the_guard_without_a_verdict(bus: Bus) -> None:
    routes = await ready_run(bus, keep="10s", guard={"window": "5s", "maxErrorPercent": 2})
    healthy = GrowingFigures(PROMOTED, calls(10))

    async def supersede() -> None:
        await asyncio.sleep(0.2)
        await advance_latest_saga(bus, NS, NAME, f"{NS}.{NAME}.3.1")

    with structlog.testing.capture_logs() as logs:
        await asyncio.wait_for(asyncio.gather(guard_ready(bus, routes, healthy), supersede()), 2)
    assert await bus.terminal_claim(REVERT_SAGA) is None
    assert logged(logs, "guard.ended")["reason"] == "a newer saga or a revert"


async def test_a_run_ready_without_its_canary_installed_is_not_guarded(bus: Bus) -> None:
    routes = await ready_run(bus, keep="10s", guard={"window": "5s", "maxErrorPercent": 2})
    other_saga = f"{NS}.{NAME}.2.9"
    ready = saga_event(
        EventType.RUN_READY,
        RunReady(revision=PROMOTED, endpoint="http://router/x", previous_revision=PREVIOUS),
        sagaid=other_saga,
    )
    failing = GrowingFigures(PROMOTED, calls(10, errors=10))
    delivery = Delivery(msg=cast(Msg, None), attempt=1)
    await asyncio.wait_for(
        guard.guard_promotion(bus, routes, failing, ready, delivery, check_s=0.05), timeout=1
    )
    assert failing.reads == 0
    assert await bus.terminal_claim(REVERT_SAGA) is None


def logged(logs: list[dict[str, Any]], event: str) -> dict[str, Any]:
    """The one line logged as ``event``."""
    lines = [line for line in logs if line["event"] == event]
    assert len(lines) == 1, logs
    return lines[0]
