"""Exactly one terminal event per saga when terminals race, against a real nats-server.

Two connections stand for two replicas. The first terminal claim wins; the loser
publishes nothing, so the stream holds one terminal per saga, the claimed one.
"""

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import structlog.testing
from prometheus_client import REGISTRY

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.bus.history import read_events
from plnt_common.bus.saga import advance_latest_saga, observe_saga
from plnt_common.events import (
    CanaryInstalled,
    CanaryRef,
    Envelope,
    EventType,
    RouteRestored,
    RunFailed,
    RunReady,
    RunRemoved,
    RunRolledBack,
    RunSnapshot,
    SmokeFigures,
    SmokeVerdict,
    SpecPulled,
    StepTimedOut,
    follow_up,
)
from plnt_common.figures import RevisionTotals
from plnt_common.releases import DesiredRelease, ObservedRelease
from plnt_common.resources import WorkflowRunSpec
from plnt_common.routes import RouteEntry
from plnt_common.saga import SagaState, TerminalClaim
from plnt_common.status import Reason
from plnt_installer.handlers import InstallerHandlers
from plnt_promoter.adapters.route_table import RouteTable
from plnt_promoter.handlers import PromoterHandlers
from plnt_testkit.events import run_requested

DELIVERY = Delivery(msg=None, attempt=1)  # type: ignore[arg-type]
ROUNDS = 12


@pytest.fixture
async def replicas(nats_url: str) -> AsyncIterator[tuple[Bus, Bus]]:
    first = await Bus.open(nats_url, service="promoter")
    second = await Bus.open(nats_url, service="installer")
    yield first, second
    await first.close()
    await second.close()


def requested(name: str) -> Envelope:
    spec = WorkflowRunSpec.model_validate(
        {
            "workflow": {"ref": "wf@1.0.0", "registry": "file:///registry"},
            "backend": {"cluster": "c"},
        }
    )
    return run_requested(RunSnapshot(namespace="default", name=name, generation=1, spec=spec))


def ready(cause: Envelope, revision: str = "1.0.0-g1") -> Envelope:
    return follow_up(
        cause, EventType.RUN_READY, RunReady(revision=revision, endpoint="http://r"), source="t"
    )


def rolled_back(cause: Envelope) -> Envelope:
    data = RunRolledBack(revision="1.0.0-g1", reason=Reason.STEP_TIMED_OUT)
    return follow_up(cause, EventType.RUN_ROLLED_BACK, data, source="t")


async def terminals_of(bus: Bus, name: str) -> list[Envelope]:
    return [
        stored.event
        async for stored in read_events(bus.nc, filter_subject=subjects.run_filter("default", name))
        if stored.event is not None and stored.event.event_type.is_terminal
    ]


async def test_two_different_terminals_racing_end_the_saga_once_and_the_loser_publishes_nothing(
    replicas: tuple[Bus, Bus],
) -> None:
    first, second = replicas
    for round_ in range(ROUNDS):
        cause = requested(f"race-{round_}")
        verdict, timeout = ready(cause), rolled_back(cause)
        won = await asyncio.gather(
            first.publish_terminal(verdict), second.publish_terminal(timeout)
        )
        assert sorted(won) == [False, True], won
        winner = verdict if won[0] else timeout
        claim = await first.terminal_claim(cause.sagaid)
        assert claim is not None and claim.event == winner
        assert await terminals_of(first, cause.name) == [winner]


async def test_the_same_terminal_claimed_again_publishes_the_claimed_event_once(
    replicas: tuple[Bus, Bus],
) -> None:
    first, second = replicas
    cause = requested("again")
    claimed = ready(cause, revision="1.0.0-g1")
    assert await first.publish_terminal(claimed) is True
    # a redelivered step builds its terminal anew (new id, maybe other figures)
    assert await second.publish_terminal(ready(cause, revision="other")) is True
    assert await terminals_of(first, "again") == [claimed]


@pytest.mark.parametrize(
    "terminal",
    [
        EventType.RUN_READY,
        EventType.RUN_ROLLED_BACK,
        EventType.RUN_FAILED,
        EventType.RUN_REMOVED,
    ],
    ids=lambda t: t.value,
)
async def test_every_terminal_type_claims_its_saga(
    replicas: tuple[Bus, Bus], terminal: EventType
) -> None:
    first, _ = replicas
    cause = requested(f"kind-{terminal.value.replace('.', '-')}")
    data = {
        EventType.RUN_READY: RunReady(revision="r", endpoint="e"),
        EventType.RUN_ROLLED_BACK: RunRolledBack(revision="r", reason=Reason.SMOKE_FAILED),
        EventType.RUN_FAILED: RunFailed(reason=Reason.SPEC_INVALID, message="bad"),
        EventType.RUN_REMOVED: RunRemoved(),
    }[terminal]
    event = follow_up(cause, terminal, data, source="t")
    assert await first.saga_ended(cause.sagaid) is False
    assert await first.publish_terminal(event) is True
    assert await first.saga_ended(cause.sagaid) is True
    assert await first.terminal_claim(cause.sagaid) == TerminalClaim.of(event)
    await advance_latest_saga(first, "default", cause.name, cause.sagaid)
    assert await observe_saga(first, cause) is SagaState.ENDED


class NoFigures:
    """No live figures: these sagas have no canary steps to judge."""

    async def totals(self, *, namespace: str, name: str) -> dict[str, RevisionTotals]:
        return {}


class NothingInstalled:
    """A ``ReleaseBackend`` holding no release: the canary is already gone."""

    def __init__(self) -> None:
        self.uninstalls = 0

    async def install(self, release: DesiredRelease, *, pulled: SpecPulled | None = None) -> None:
        raise AssertionError("the race test installs nothing")

    async def wait_ready(
        self,
        *,
        namespace: str,
        release: str,
        saga_id: str,
        timeout_s: float,
        pulled: SpecPulled | None = None,
    ) -> ObservedRelease:
        raise AssertionError("the race test installs nothing")

    async def uninstall(
        self, *, namespace: str, release: str, timeout_s: float, pulled: SpecPulled | None = None
    ) -> bool:
        self.uninstalls += 1
        return False

    async def releases(self, *, namespace: str, run_name: str) -> list[DesiredRelease]:
        return []

    async def status(self, *, namespace: str, release: str) -> ObservedRelease | None:
        return None


def meet_at_the_claim(*buses: Bus) -> None:
    """Hold each bus's terminal claim until every one is about to claim: both steps have
    passed their saga checks, so the claim alone decides."""
    barrier = asyncio.Barrier(len(buses))
    for bus in buses:
        claim = Bus.publish_terminal.__get__(bus)

        async def gated(envelope: Envelope, claim: Callable[..., Awaitable[bool]] = claim) -> bool:
            await asyncio.wait_for(barrier.wait(), timeout=5)
            return await claim(envelope)

        bus.publish_terminal = gated  # type: ignore[method-assign]


async def canary_routed(
    promoter: PromoterHandlers, bus: Bus, cause: Envelope
) -> tuple[Envelope, Envelope]:
    """Saga ``cause`` current, its canary installed and routed by ``promoter``:
    (canary.installed, the smoke.passed that follows it)."""
    await advance_latest_saga(bus, "default", cause.name, cause.sagaid)
    run = cause.payload().run
    canary = CanaryRef(revision="1.0.0-g1", release=f"{cause.name}-g1", url="http://c")
    installed = follow_up(
        cause, EventType.CANARY_INSTALLED, CanaryInstalled(run=run, canary=canary), source="t"
    )
    await promoter.handle(installed, DELIVERY)
    passed = follow_up(
        installed,
        EventType.SMOKE_PASSED,
        SmokeVerdict(canary=canary, figures=SmokeFigures(passed=True, invocations=3)),
        source="t",
    )
    return installed, passed


async def test_a_late_smoke_pass_racing_a_deadline_compensation_ends_each_saga_once(
    replicas: tuple[Bus, Bus],
) -> None:
    """The promoter promotes on smoke.passed while the installer compensates the smoke
    step's timeout (route.restored): both see a current saga, one terminal wins."""
    promoter_bus, installer_bus = replicas
    promoter = PromoterHandlers(
        bus=promoter_bus,
        routes=RouteTable(promoter_bus.routes),
        public_url="http://router",
        figures=NoFigures(),
    )
    installer = InstallerHandlers(
        bus=installer_bus,
        backends={"local": NothingInstalled()},
        ready_timeout_s=1,
        uninstall_timeout_s=1,
    )
    outcomes: Counter[EventType] = Counter()
    for round_ in range(ROUNDS):
        meet_at_the_claim(promoter_bus, installer_bus)
        cause = requested(f"late-{round_}")
        installed, passed = await canary_routed(promoter, promoter_bus, cause)
        canary = installed.payload().canary
        restored = follow_up(
            installed,
            EventType.ROUTE_RESTORED,
            RouteRestored(
                revision=canary.revision,
                release=canary.release,
                reason=Reason.STEP_TIMED_OUT,
                message="Smoking passed its 1s deadline",
            ),
            source="t",
        )
        await asyncio.gather(
            promoter.handle(passed, DELIVERY), installer.handle(restored, DELIVERY)
        )

        terminals = await terminals_of(promoter_bus, cause.name)
        assert len(terminals) == 1, [e.event_type.value for e in terminals]
        claim = await promoter_bus.terminal_claim(cause.sagaid)
        assert claim is not None and claim.event == terminals[0]
        outcomes[terminals[0].event_type] += 1
    # either may win a round: the verdict (run.ready) or the compensation (run.failed,
    # no stable revision to roll back to)
    assert set(outcomes) <= {EventType.RUN_READY, EventType.RUN_FAILED}, outcomes


def claims_counted(service: str) -> float:
    value = REGISTRY.get_sample_value(
        "plnt_side_effects_total", {"service": service, "effect": "terminal_claim"}
    )
    return value or 0.0


async def test_the_winning_claim_is_counted_and_the_refused_one_is_logged(
    replicas: tuple[Bus, Bus],
) -> None:
    first, second = replicas
    cause = requested("counted")
    before = claims_counted("promoter"), claims_counted("installer")
    assert await first.publish_terminal(ready(cause)) is True
    with structlog.testing.capture_logs() as logs:
        assert await second.publish_terminal(rolled_back(cause)) is False
    assert (claims_counted("promoter"), claims_counted("installer")) == (before[0] + 1, before[1])
    refused = [line for line in logs if line["event"] == "saga.terminal_already_claimed"]
    assert refused == [
        {
            "event": "saga.terminal_already_claimed",
            "log_level": "info",
            "sagaid": cause.sagaid,
            "refused": "run.rolled_back",
            "claimed_by": "run.ready",
        }
    ]


async def test_a_claim_left_unpublished_by_a_crash_is_what_a_later_claimer_publishes(
    replicas: tuple[Bus, Bus],
) -> None:
    first, second = replicas
    cause = requested("unpublished")
    claimed = ready(cause, revision="1.0.0-g1")
    await first.sagas.create(cause.sagaid, TerminalClaim.of(claimed).encode())
    assert await terminals_of(first, "unpublished") == []
    assert await second.publish_terminal(ready(cause, revision="built-anew")) is True
    assert await terminals_of(first, "unpublished") == [claimed]


async def test_a_claim_gone_between_the_refusal_and_its_read_publishes_nothing(
    replicas: tuple[Bus, Bus], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = replicas
    cause = requested("vanished")
    assert await first.publish_terminal(ready(cause)) is True

    async def no_claim(sagaid: str) -> TerminalClaim | None:
        return None  # the claim was purged after the create was refused

    monkeypatch.setattr(second, "terminal_claim", no_claim)
    assert await second.publish_terminal(rolled_back(cause)) is False
    assert [e.event_type for e in await terminals_of(first, "vanished")] == [EventType.RUN_READY]


def hold_the_claim(bus: Bus) -> tuple[asyncio.Event, asyncio.Event]:
    """Park ``bus``'s terminal claims: (set when one is about to claim, set to let it go)."""
    reached, release = asyncio.Event(), asyncio.Event()
    claim: Callable[[Envelope], Awaitable[bool]] = Bus.publish_terminal.__get__(bus)

    async def held(envelope: Envelope) -> bool:
        reached.set()
        await asyncio.wait_for(release.wait(), timeout=10)
        return await claim(envelope)

    bus.publish_terminal = held  # type: ignore[method-assign]
    return reached, release


def compensation_for(
    promoter_bus: Bus, other_bus: Bus
) -> tuple[PromoterHandlers, PromoterHandlers, InstallerHandlers]:
    """Two promoter replicas (one on each bus) and an installer on ``other_bus``."""
    promoting, compensating = (
        PromoterHandlers(
            bus=bus, routes=RouteTable(bus.routes), public_url="http://router", figures=NoFigures()
        )
        for bus in (promoter_bus, other_bus)
    )
    installer = InstallerHandlers(
        bus=other_bus,
        backends={"local": NothingInstalled()},
        ready_timeout_s=1,
        uninstall_timeout_s=1,
    )
    return promoting, compensating, installer


async def restored_events(bus: Bus, name: str) -> list[Envelope]:
    return [
        stored.event
        async for stored in read_events(bus.nc, filter_subject=subjects.run_filter("default", name))
        if stored.event is not None and stored.event.event_type is EventType.ROUTE_RESTORED
    ]


def smoke_deadline(installed: Envelope) -> Envelope:
    deadline = StepTimedOut(phase="Smoking", deadline_s=1)
    return follow_up(installed, EventType.STEP_TIMED_OUT, deadline, source="t")


async def test_a_restore_after_the_promotion_wrote_the_route_ends_the_saga_ready(
    replicas: tuple[Bus, Bus],
) -> None:
    """Two promoter replicas: one promotes on smoke.passed and is slow to claim run.ready;
    the other compensates the smoke step's timeout. The promotion is in the route first, so
    the restore changes nothing, publishes no route.restored (the installer would uninstall
    the serving canary), and the saga ends Ready whichever replica claims."""
    promoter_bus, other_bus = replicas
    promoting, compensating, installer = compensation_for(promoter_bus, other_bus)
    cause = requested("promoted-then-lost")
    installed, passed = await canary_routed(promoting, promoter_bus, cause)
    reached, release = hold_the_claim(promoter_bus)
    promotion = asyncio.create_task(promoting.handle(passed, DELIVERY))
    await asyncio.wait_for(reached.wait(), timeout=10)  # the route is promoted by now

    await compensating.handle(smoke_deadline(installed), DELIVERY)
    for restored in await restored_events(other_bus, cause.name):
        await installer.handle(restored, DELIVERY)
    release.set()
    await promotion

    assert await restored_events(other_bus, cause.name) == []
    terminals = await terminals_of(promoter_bus, cause.name)
    assert [e.event_type for e in terminals] == [EventType.RUN_READY]
    entry, _ = await RouteTable(promoter_bus.routes).get(namespace="default", name=cause.name)
    assert entry is not None
    assert entry.stable is not None
    assert entry.stable.saga_id == cause.sagaid


def hold_the_route_writes(routes: RouteTable) -> tuple[asyncio.Event, asyncio.Event]:
    """Park ``routes``' writes: (set when one is about to write, set to let it go)."""
    reached, release = asyncio.Event(), asyncio.Event()
    update = routes.update

    async def held(**change: Any) -> RouteEntry | None:
        reached.set()
        await asyncio.wait_for(release.wait(), timeout=10)
        return await update(**change)

    routes.update = held  # type: ignore[method-assign]
    return reached, release


async def test_a_promotion_after_the_restore_wrote_the_route_publishes_nothing(
    replicas: tuple[Bus, Bus],
) -> None:
    """The reverse order: the promoter decided to promote, then the other replica's
    restore took the canary out before the promotion's route write. The promotion must
    neither write nor claim run.ready (a Ready saga on a canary the installer is removing);
    the compensation ends the saga."""
    promoter_bus, other_bus = replicas
    promoting, compensating, installer = compensation_for(promoter_bus, other_bus)
    cause = requested("restored-then-promoted")
    installed, passed = await canary_routed(promoting, promoter_bus, cause)
    reached, release = hold_the_route_writes(promoting._routes)
    promotion = asyncio.create_task(promoting.handle(passed, DELIVERY))
    await asyncio.wait_for(reached.wait(), timeout=10)  # decided: PROMOTE

    await compensating.handle(smoke_deadline(installed), DELIVERY)
    release.set()
    await promotion
    (restored,) = await restored_events(other_bus, cause.name)
    await installer.handle(restored, DELIVERY)

    terminals = await terminals_of(promoter_bus, cause.name)
    assert [e.event_type for e in terminals] == [EventType.RUN_FAILED]  # nothing to roll back to
    entry, _ = await RouteTable(promoter_bus.routes).get(namespace="default", name=cause.name)
    assert entry is not None
    assert entry.stable is None
    assert entry.canary is None


async def test_a_terminal_claimed_again_past_the_duplicate_window_is_not_stored_twice(
    replicas: tuple[Bus, Bus],
) -> None:
    # the window is two hours in production; past it, the server would store a
    # republished terminal again: what stops it is the claim's published record
    first, second = replicas
    info = await first.js.stream_info(subjects.STREAM)
    info.config.duplicate_window = 1.0
    await first.js.update_stream(info.config)
    cause = requested("past-window")
    failed = follow_up(
        cause,
        EventType.RUN_FAILED,
        RunFailed(reason=Reason.DELIVERY_EXHAUSTED, message="gave up"),
        source="t",
    )
    assert await first.publish_terminal(failed) is True
    await asyncio.sleep(1.5)
    # a redelivered step claiming it again, and a delivery of its cause seeing the claim
    assert await second.publish_terminal(failed) is True
    assert await observe_saga(second, cause) is SagaState.ENDED
    assert await terminals_of(first, "past-window") == [failed]
