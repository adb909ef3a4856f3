"""A promoter on a real nats-server, as its service runs it (its FastStream app, its ordered
durable consumer), with runs staged at a held step or in the guard window, figures from a
source the test sets, and every event published to a run counted as it goes out."""

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from nats.aio.msg import Msg

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.saga import advance_latest_saga
from plnt_common.bus.service_app import service_app
from plnt_common.events import (
    CanaryInstalled,
    CanaryRef,
    CanaryStepped,
    Envelope,
    EventType,
    OperatorRequest,
    RunReady,
    RunSnapshot,
    SmokeFigures,
    SmokeVerdict,
    decode_event,
    new_event,
)
from plnt_common.figures import RevisionTotals
from plnt_common.releases import ObservedRelease, ReleasePhase, observed_key, release_name
from plnt_common.resources import WorkflowRunSpec
from plnt_common.routes import RouteEntry, RouteTarget
from plnt_promoter import analysis, held_window
from plnt_promoter.adapters.route_table import RouteTable
from plnt_promoter.app import EMITS, consumer_spec
from plnt_promoter.handlers import PromoterHandlers
from plnt_promoter.settings import PromoterSettings

NS = "default"
STABLE, CANARY = "1.0.0-g1", "2.0.0-g2"


def saga_of(name: str) -> str:
    return f"{NS}.{name}.2.1"


def canary_ref(name: str) -> CanaryRef:
    return CanaryRef(revision=CANARY, release=release_name(NS, name, 2), url="http://127.0.0.1:2")


def totals(calls: int, *, errors: int = 0, slow: int = 0) -> RevisionTotals:
    """``calls`` calls, ``slow`` of them between 0.1 and 1 s, the rest within 0.1 s."""
    buckets = ((0.1, calls - slow), (1.0, calls), (float("inf"), calls))
    return RevisionTotals(invocations=calls, errors=errors, latency_buckets=buckets)


class SetFigures:
    """The live figures the router would publish: whatever the test set last."""

    def __init__(self) -> None:
        self.now: dict[str, dict[str, RevisionTotals]] = {}
        self.reads = 0

    def set(self, name: str, by_revision: Mapping[str, RevisionTotals]) -> None:
        self.now[name] = dict(by_revision)

    async def totals(self, *, namespace: str, name: str) -> dict[str, RevisionTotals]:
        self.reads += 1
        return dict(self.now.get(name, {}))


def event(name: str, kind: EventType, data: Any, *, age_s: float = 0.0) -> Envelope:
    made = new_event(
        kind, data, namespace=NS, name=name, sagaid=saga_of(name), generation=2, source="test"
    )
    return made.model_copy(update={"time": made.time - timedelta(seconds=age_s)})


def spec(canary: dict[str, Any], **more: Any) -> WorkflowRunSpec:
    return WorkflowRunSpec.model_validate(
        {
            "workflow": {"ref": "x@2.0.0", "registry": "file:///r"},
            "backend": {"cluster": "local"},
            "canary": canary,
            **more,
        }
    )


async def canary_routed(bus: Bus, name: str, run_spec: WorkflowRunSpec, weight: int) -> None:
    """The run's generation 2 saga current, its canary in the route at ``weight`` and its
    ``canary.installed`` in the stream."""
    saga = saga_of(name)
    await advance_latest_saga(bus, NS, name, saga)
    stable = RouteTarget(revision=STABLE, url="http://127.0.0.1:1", saga_id=f"{NS}.{name}.1.1")
    canary = RouteTarget(revision=CANARY, url="http://127.0.0.1:2", saga_id=saga)
    entry = RouteEntry(namespace=NS, name=name, stable=stable, canary=canary, canary_weight=weight)
    await RouteTable(bus.routes).update(namespace=NS, name=name, change=lambda _: entry)
    run = RunSnapshot(namespace=NS, name=name, generation=2, spec=run_spec)
    installed = CanaryInstalled(run=run, canary=canary_ref(name))
    await bus.publish(event(name, EventType.CANARY_INSTALLED, installed))


async def stepping(bus: Bus, name: str, *, interval: str, min_invocations: int = 20) -> None:
    """The run at its first step (10 %) of ``[10, 50]``: its ``canary.stepped`` published."""
    run_spec = spec(
        {
            "steps": [10, 50],
            "stepInterval": interval,
            "analysis": {"minInvocations": min_invocations, "maxErrorPercent": 1},
        }
    )
    await canary_routed(bus, name, run_spec, weight=10)
    plan = run_spec.canary
    stepped = CanaryStepped(
        canary=canary_ref(name),
        plan=plan,
        step=1,
        traffic_percent=10,
        hold_s=analysis.hold_s(plan.step_interval_s),
    )
    await bus.publish(event(name, EventType.CANARY_STEPPED, stepped), step="1")


async def smoke_passed(bus: Bus, name: str) -> None:
    """A run without steps whose smoke test passed: the promoter promotes it."""
    await canary_routed(bus, name, spec({}), weight=10)
    verdict = SmokeVerdict(canary=canary_ref(name), figures=SmokeFigures(passed=True))
    await bus.publish(event(name, EventType.SMOKE_PASSED, verdict))


async def ready_guarded(bus: Bus, name: str, guard: dict[str, Any]) -> Envelope:
    """Generation 2 Ready (its run.ready claimed and published), generation 1 kept."""
    await canary_routed(bus, name, spec({}, guard=guard, rollback={"keepPreviousFor": "1m"}), 0)
    kept = ObservedRelease(
        namespace=NS,
        release=release_name(NS, name, 1),
        revision=STABLE,
        saga_id=f"{NS}.{name}.1.1",
        phase=ReleasePhase.READY,
        url="http://127.0.0.1:1",
    )
    await bus.releases.put(observed_key(NS, kept.release), kept.model_dump_json().encode())
    promoted = RouteTarget(revision=CANARY, url="http://127.0.0.1:2", saga_id=saga_of(name))
    await RouteTable(bus.routes).update(
        namespace=NS,
        name=name,
        change=lambda _: RouteEntry(namespace=NS, name=name, stable=promoted),
    )
    ready = event(
        name,
        EventType.RUN_READY,
        RunReady(revision=CANARY, endpoint="http://router/x", previous_revision=STABLE),
    )
    await bus.publish_terminal(ready)
    return ready


async def request(bus: Bus, name: str, kind: EventType, *, full: bool = False) -> Envelope:
    sent = event(name, kind, OperatorRequest(by="test", full=full))
    await bus.publish(sent, step="test")
    return sent


class Published:
    """Every event published to the runs' subjects, duplicates included (a core
    subscription sees each publish, whatever the stream deduplicates)."""

    def __init__(self) -> None:
        self.events: list[Envelope] = []

    async def _take(self, msg: Msg) -> None:
        self.events.append(decode_event(msg.data))

    def count(self, name: str | None = None) -> Counter[EventType]:
        return Counter(e.event_type for e in self.events if name is None or e.name == name)

    def of(self, name: str, kind: EventType) -> list[Envelope]:
        return [e for e in self.events if e.name == name and e.event_type is kind]


@contextlib.asynccontextmanager
async def published(bus: Bus) -> AsyncIterator[Published]:
    seen = Published()
    subscription = await bus.nc.subscribe(f"{subjects.SUBJECT_PREFIX}.>", cb=seen._take)
    try:
        yield seen
    finally:
        await subscription.unsubscribe()


@contextlib.asynccontextmanager
async def promoter(
    nats_url: str, figures: SetFigures, *, check_s: float, concurrency: int = 16
) -> AsyncIterator[None]:
    """The promoter's consumer and handlers running until the block ends (a graceful stop:
    in-flight checks finish, deferred events wait in the stream for the next promoter)."""
    bus = await Bus.open(nats_url, service="promoter")
    handlers = PromoterHandlers(
        bus=bus,
        routes=RouteTable(bus.routes),
        public_url="http://router",
        figures=figures,
        check_s=check_s,
    )
    settings = PromoterSettings(concurrency=concurrency)
    app = service_app(bus, consumer_spec(settings), emits=EMITS, handlers=handlers)
    stop = asyncio.Event()
    running = asyncio.create_task(app.run(stop))
    try:
        yield
    finally:
        stop.set()
        await running
        await bus.close()


async def held(bus: Bus, name: str, wait: str) -> held_window.HeldWindow | None:
    return (await held_window.load(bus, saga_of(name), wait))[0]


async def until(
    condition: Callable[[], Any], *, timeout_s: float, what: str, every_s: float = 0.02
) -> float:
    """Wait for ``condition()`` (awaited when a coroutine) to hold; the loop time it did.
    Fails after ``timeout_s`` naming ``what``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        answer = condition()
        if asyncio.iscoroutine(answer):
            answer = await answer
        if answer:
            return loop.time()
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        await asyncio.sleep(every_s)


def epoch(when: datetime) -> float:
    return when.timestamp()
