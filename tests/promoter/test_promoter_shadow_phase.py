"""The shadow phase against a real nats-server: the promoter service (its app, its
consumer, its deferred checks) and pairs the test publishes on the real PLNT_SHADOW stream,
as the router would. Each case counts what the saga published and the route writes."""

import asyncio
import contextlib
import itertools
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest
from nats.js.errors import BadRequestError

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.history import read_events
from plnt_common.bus.saga import advance_latest_saga
from plnt_common.events import (
    CanaryInstalled,
    CanaryRef,
    Envelope,
    EventType,
    OperatorRequest,
    RunSnapshot,
    SmokeFigures,
    SmokeVerdict,
    StepTimedOut,
    new_event,
)
from plnt_common.resources import WorkflowRunSpec
from plnt_common.routes import RouteEntry, RouteTarget
from plnt_common.shadow_pairs import PairKind, ShadowAnswer, ShadowPair
from plnt_promoter import app
from plnt_promoter.adapters.route_table import RouteTable
from plnt_promoter.settings import PromoterSettings

NS = "default"
STABLE, CANARY = "1.0.0-g1", "2.0.0-g2"
CANARY_REF = CanaryRef(revision=CANARY, release="default-shop-g2", url="http://127.0.0.1:39002")
WAIT_S = 15.0
T = TypeVar("T")
_names = itertools.count()


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    """The test's bus, with the PLNT_SHADOW stream (the router's provisioning creates it
    too) and a promoter service checking its shadow phases every 0.1 s."""
    opened = await Bus.open(nats_url, service="test")
    with contextlib.suppress(BadRequestError):  # provisioned already
        await opened.js.add_stream(
            name=subjects.SHADOW_STREAM, subjects=list(subjects.SHADOW_SUBJECTS)
        )
    settings = PromoterSettings(nats_url=nats_url, shadow_check_s=0.1)
    stop = asyncio.Event()
    task = asyncio.create_task(app.run(settings, stop))
    try:
        yield opened
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=15)
        await opened.close()


class Run:
    """One run of generation 2 whose stable 1.0.0-g1 serves, rolling out 2.0.0-g2."""

    def __init__(self, bus: Bus, shadow: dict[str, Any], steps: tuple[int, ...] = ()) -> None:
        self.bus = bus
        self.name = f"shop-{next(_names)}"
        self.saga = f"{NS}.{self.name}.2.1"
        self.routes = RouteTable(bus.routes)
        self.spec = WorkflowRunSpec.model_validate(
            {
                "workflow": {"ref": "shop@2.0.0", "registry": "file:///r"},
                "backend": {"cluster": "local"},
                "canary": {"trafficPercent": 10, "steps": list(steps), "shadow": shadow},
            }
        )
        self._pairs = itertools.count()

    def event(self, kind: EventType, data: Any) -> Envelope:
        return new_event(
            kind, data, namespace=NS, name=self.name, sagaid=self.saga, generation=2, source="t"
        )

    async def smoke_passed(self) -> None:
        """Stable routed, the saga current, canary.installed then smoke.passed published."""
        stable = RouteTarget(revision=STABLE, url="http://127.0.0.1:39001", saga_id="x.1.1")
        await self.routes.update(
            namespace=NS,
            name=self.name,
            change=lambda _: RouteEntry(namespace=NS, name=self.name, stable=stable),
        )
        await advance_latest_saga(self.bus, NS, self.name, self.saga)
        run = RunSnapshot(namespace=NS, name=self.name, generation=2, spec=self.spec)
        await self.bus.publish(
            self.event(EventType.CANARY_INSTALLED, CanaryInstalled(run=run, canary=CANARY_REF))
        )
        await self.route_where(lambda e: e.canary is not None, "the canary routed")
        figures = SmokeFigures(passed=True, invocations=3)
        await self.bus.publish(
            self.event(EventType.SMOKE_PASSED, SmokeVerdict(canary=CANARY_REF, figures=figures))
        )

    async def publish_pairs(
        self,
        n: int,
        *,
        canary_output: Any = None,
        kind: PairKind = PairKind.CANARY,
        status: int = 200,
        saga: str = "",
        cost: float = 0.01,
    ) -> None:
        for _ in range(n):
            index = next(self._pairs)
            output = {"queue": "billing", "priority": 2}
            candidate = canary_output if canary_output is not None else output
            pair = ShadowPair(
                pair_id=f"{self.name}-{index}",
                namespace=NS,
                name=self.name,
                saga_id=saga or self.saga,
                kind=kind,
                input={"text": f"ticket {index}"},
                stable=answer(STABLE, output),
                candidate=answer(CANARY, candidate, status=status, cost=cost),
                at=time.time(),
            )
            await self.bus.js.publish(
                subjects.shadow_subject(NS, self.name), pair.model_dump_json().encode()
            )

    async def events(self) -> list[Envelope]:
        return [
            stored.event
            async for stored in read_events(
                self.bus.nc, filter_subject=subjects.run_filter(NS, self.name)
            )
            if stored.event is not None
        ]

    async def counted(self) -> Counter[EventType]:
        return Counter(e.event_type for e in await self.events())

    async def wait_for(self, kind: EventType) -> Envelope:
        async def found() -> Envelope | None:
            return next((e for e in await self.events() if e.event_type is kind), None)

        return await eventually(found, f"{kind.value} of {self.name}")

    async def route(self) -> tuple[RouteEntry, int]:
        entry, revision = await self.routes.get(namespace=NS, name=self.name)
        assert entry is not None
        return entry, revision

    async def route_where(self, holds: Callable[[RouteEntry], bool], what: str) -> RouteEntry:
        async def found() -> RouteEntry | None:
            entry, _ = await self.routes.get(namespace=NS, name=self.name)
            return entry if entry is not None and holds(entry) else None

        return await eventually(found, what)


def answer(revision: str, output: Any, *, status: int = 200, cost: float = 0.01) -> ShadowAnswer:
    body = {"output": output, "reply": None, "usage": {}} if status == 200 else {"error": "x"}
    return ShadowAnswer(
        revision=revision, status=status, body=body, latency_ms=100.0, cost_usd=cost
    )


async def eventually(probe: Callable[[], Awaitable[T | None]], what: str) -> T:
    give_up = time.monotonic() + WAIT_S
    while time.monotonic() < give_up:
        value = await probe()
        if value is not None:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {what} within {WAIT_S}s")


async def shadowing(run: Run) -> RouteEntry:
    await run.smoke_passed()
    await run.wait_for(EventType.SHADOW_STARTED)
    return await run.route_where(lambda e: e.shadow is not None, "the route's shadow")


async def test_similar_answers_pass_after_n_pairs_then_the_canary_is_promoted(bus: Bus) -> None:
    run = Run(bus, {"percent": 20, "calls": 5, "maxDuration": "30s", "budgetUsd": 5})
    entry = await shadowing(run)
    assert entry.shadow is not None and entry.canary is not None
    assert (entry.shadow.saga_id, entry.shadow.percent, entry.shadow.noise_percent) == (
        run.saga,
        20,
        5,
    )
    assert (entry.shadow.budget_usd, entry.canary_weight) == (5, 0)
    # another saga's failing pairs are not this phase's
    await run.publish_pairs(5, status=500, saga=f"{NS}.{run.name}.1.1")
    await run.publish_pairs(2, kind=PairKind.NOISE)
    await run.publish_pairs(4)
    await run.wait_for(EventType.SHADOW_CHECKED)
    assert EventType.SHADOW_PASSED not in await run.counted()  # 4 of 5: no verdict yet
    await run.publish_pairs(1)
    passed = await run.wait_for(EventType.SHADOW_PASSED)
    figures = passed.payload().figures
    assert (figures.pairs, figures.noise_pairs, figures.similarity, figures.passed) == (
        5,
        2,
        1.0,
        True,
    )
    await run.wait_for(EventType.RUN_READY)
    final, revision = await run.route()
    assert final.stable is not None and final.stable.revision == CANARY
    assert (final.canary, final.shadow) == (None, None)
    # stable, canary routed, shadow on (weight 0), shadow off, promoted: one write each
    assert revision == 5
    counted = await run.counted()
    assert counted[EventType.SHADOW_STARTED] == counted[EventType.SHADOW_PASSED] == 1
    assert counted[EventType.RUN_READY] == 1 and EventType.SHADOW_FAILED not in counted


async def test_a_shadow_pass_goes_on_to_the_canary_steps(bus: Bus) -> None:
    run = Run(bus, {"percent": 20, "calls": 2, "maxDuration": "30s"}, steps=(10, 50))
    await shadowing(run)
    await run.publish_pairs(2)
    stepped = await run.wait_for(EventType.CANARY_STEPPED)
    assert stepped.payload().traffic_percent == 10
    entry = await run.route_where(lambda e: e.canary_weight == 10, "step 1's weight")
    assert entry.shadow is None
    # end the step's hold, so the promoter stops at once
    await run.bus.publish(run.event(EventType.ABORT_REQUESTED, OperatorRequest(by="plnt")))
    await run.wait_for(EventType.ROUTE_RESTORED)


async def test_low_similarity_fails_naming_the_figure_and_rolls_the_canary_back(bus: Bus) -> None:
    run = Run(bus, {"percent": 20, "calls": 4, "maxDuration": "30s"})
    await shadowing(run)
    await run.publish_pairs(2, kind=PairKind.NOISE)
    await run.publish_pairs(4, canary_output={"queue": None, "priority": 5})
    failed = await run.wait_for(EventType.SHADOW_FAILED)
    reason = "median similarity 0.00 < 0.85; stable vs stable 1.00"
    assert failed.payload().figures.reason == reason
    restored = await run.wait_for(EventType.ROUTE_RESTORED)
    assert (restored.payload().reason, restored.payload().message) == (
        "ShadowFailed",
        f"shadow failed: {reason}",
    )
    entry, revision = await run.route()
    assert entry.stable is not None and entry.stable.revision == STABLE
    assert (entry.canary, entry.shadow, revision) == (None, None, 4)  # ... restored: 4 writes
    counted = await run.counted()
    assert counted[EventType.SHADOW_FAILED] == counted[EventType.ROUTE_RESTORED] == 1
    assert EventType.SHADOW_PASSED not in counted and EventType.RUN_READY not in counted


@pytest.mark.parametrize(
    ("shadow", "publish", "reason"),
    [
        pytest.param(
            {"percent": 20, "calls": 5, "maxDuration": "1s"},
            {"n": 1},
            "only 1 of 5 pairs within maxDuration 1s",
            id="too-few-by-max-duration",
        ),
        pytest.param(
            {"percent": 20, "calls": 10, "maxDuration": "30s", "budgetUsd": 0.03},
            {"n": 3},
            "shadow calls spent $0.0300 of budgetUsd 0.03 with 3 of 10 pairs",
            id="budget",
        ),
        pytest.param(
            {"percent": 20, "calls": 100, "maxDuration": "30s"},
            {"n": 2, "status": 502},
            "canary errors 2 (stable 0) already put the error percent delta over "
            "maxErrorPercentDelta 1 of 100 pairs",
            id="early-errors",
        ),
    ],
)
async def test_a_shadow_phase_fails_before_n_for_want_of_time_money_or_hope(
    bus: Bus, shadow: dict[str, Any], publish: dict[str, Any], reason: str
) -> None:
    run = Run(bus, shadow)
    await shadowing(run)
    await run.publish_pairs(**publish)
    failed = await run.wait_for(EventType.SHADOW_FAILED)
    assert failed.payload().figures.reason == reason
    await run.wait_for(EventType.ROUTE_RESTORED)
    counted = await run.counted()
    assert counted[EventType.SHADOW_FAILED] == 1 and EventType.SHADOW_PASSED not in counted


async def test_an_abort_while_shadowing_rolls_back_with_no_shadow_verdict(bus: Bus) -> None:
    run = Run(bus, {"percent": 20, "calls": 50, "maxDuration": "30s"})
    await shadowing(run)
    await run.publish_pairs(3)
    await run.bus.publish(run.event(EventType.ABORT_REQUESTED, OperatorRequest(by="plnt")))
    restored = await run.wait_for(EventType.ROUTE_RESTORED)
    assert restored.payload().reason == "Aborted"
    entry = await run.route_where(lambda e: e.canary is None, "the canary out")
    assert entry.shadow is None
    await run.publish_pairs(50)  # late pairs judge nothing: the phase ended
    await asyncio.sleep(0.5)  # several checks' worth
    counted = await run.counted()
    assert EventType.SHADOW_PASSED not in counted and EventType.SHADOW_FAILED not in counted
    assert counted[EventType.ROUTE_RESTORED] == 1


async def test_a_shadow_phase_past_its_deadline_is_rolled_back_and_its_mirroring_ends(
    bus: Bus,
) -> None:
    """The watcher's step.timed_out for Shadowing (a promoter away past maxDuration plus the
    deadline's margin) takes the canary out and ends the mirroring, once."""
    run = Run(bus, {"percent": 20, "calls": 50, "maxDuration": "30s"})
    await shadowing(run)
    timed_out = StepTimedOut(phase="Shadowing", deadline_s=150.0)
    await run.bus.publish(run.event(EventType.STEP_TIMED_OUT, timed_out))
    restored = await run.wait_for(EventType.ROUTE_RESTORED)
    assert restored.payload().reason == "StepTimedOut"
    entry = await run.route_where(lambda e: e.canary is None, "the canary out")
    assert entry.shadow is None and entry.stable is not None
    await asyncio.sleep(0.5)  # several checks' worth
    counted = await run.counted()
    assert EventType.SHADOW_PASSED not in counted and EventType.SHADOW_FAILED not in counted
    assert counted[EventType.ROUTE_RESTORED] == 1


async def test_a_first_rollout_has_no_stable_to_shadow_and_is_promoted(bus: Bus) -> None:
    run = Run(bus, {"percent": 20, "calls": 5})
    run.routes = RouteTable(bus.routes)
    await advance_latest_saga(bus, NS, run.name, run.saga)
    snapshot = RunSnapshot(namespace=NS, name=run.name, generation=2, spec=run.spec)
    await bus.publish(
        run.event(EventType.CANARY_INSTALLED, CanaryInstalled(run=snapshot, canary=CANARY_REF))
    )
    await run.route_where(lambda e: e.canary is not None, "the canary routed")
    verdict = SmokeVerdict(canary=CANARY_REF, figures=SmokeFigures(passed=True))
    await bus.publish(run.event(EventType.SMOKE_PASSED, verdict))
    await run.wait_for(EventType.RUN_READY)
    assert EventType.SHADOW_STARTED not in await run.counted()


async def test_promote_full_while_shadowing_promotes_at_once_with_no_shadow_verdict(
    bus: Bus,
) -> None:
    run = Run(bus, {"percent": 20, "calls": 50, "maxDuration": "30s"}, steps=(10, 50))
    await shadowing(run)
    await run.publish_pairs(3)
    await run.bus.publish(
        run.event(EventType.PROMOTE_REQUESTED, OperatorRequest(by="plnt", full=True))
    )
    await run.wait_for(EventType.RUN_READY)
    entry, _ = await run.route()
    assert entry.stable is not None and entry.stable.revision == CANARY
    assert (entry.canary, entry.shadow) == (None, None)
    await run.publish_pairs(50)  # late pairs judge nothing: the phase ended
    await asyncio.sleep(0.5)  # several checks' worth
    counted = await run.counted()
    assert EventType.SHADOW_PASSED not in counted and EventType.SHADOW_FAILED not in counted
    assert EventType.CANARY_STEPPED not in counted and counted[EventType.RUN_READY] == 1
