"""Placement against a real nats-server: the capacity view in plnt-capacity, compare-and-set
reservations, and a run Pending (NoCapacity) that is placed once GPUs free.

The installer's handlers run with the real local release backend and capacity source; the
test plays the local-backend (an observed Ready record for every desired release, removed
with it) and the consumer (a deferred event is handed back). Installs are counted as the
desired records the backend wrote, not as events.
"""

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.bus.history import read_events
from plnt_common.bus.kv_snapshot import kv_snapshot
from plnt_common.capacity import BackendCapacity
from plnt_common.events import (
    Envelope,
    EventType,
    RunDeleted,
    RunSnapshot,
    SpecPulled,
    new_event,
)
from plnt_common.projection import RunProjection, apply_event
from plnt_common.releases import (
    DESIRED_PREFIX,
    OBSERVED_PREFIX,
    DesiredRelease,
    ObservedRelease,
    ReleasePhase,
    observed_key,
)
from plnt_common.resources import PlntBackendSpec, WorkflowRunSpec
from plnt_common.status import Phase, Reason
from plnt_common.tasks import cancelled
from plnt_installer.adapters.capacity_sources import LocalCapacitySource
from plnt_installer.adapters.capacity_store import CapacityStore
from plnt_installer.adapters.local_releases import LocalReleaseBackend
from plnt_installer.handlers import InstallerHandlers
from plnt_installer.placement import CapacityObserver, Placements

BACKEND = "workstation"
GPUS = 8
RUNS = 20
SPEC = WorkflowRunSpec.model_validate(
    {
        "workflow": {"ref": "review-responder@1.2.0", "registry": "file:///registry"},
        "backend": {"cluster": BACKEND, "gpuClass": "a100", "gpuCount": 1},
    }
)
LOCAL = PlntBackendSpec.model_validate(
    {
        "type": "local",
        "gpuClasses": {"a100": {"resourceName": "nvidia.com/gpu", "capacity": GPUS}},
    }
)


class Handed:
    """What the consumer would do with ``defer``: remember the delay."""

    deferred_s: float | None = None

    def defer(self, seconds: float) -> None:
        self.deferred_s = seconds


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    opened = await Bus.open(nats_url, service="test")
    yield opened
    await opened.close()


ReadyWhen = Callable[[DesiredRelease, list[DesiredRelease]], bool]


async def play_local_backend(bus: Bus, ready_when: ReadyWhen = lambda _, __: True) -> None:
    """Every desired release is observed Ready (once ``ready_when`` it and every desired
    release say so); a removed one stops being observed."""
    while True:
        desired = await kv_snapshot(bus.nc, subjects.RELEASES_BUCKET, f"{DESIRED_PREFIX}.>")
        observed = await kv_snapshot(bus.nc, subjects.RELEASES_BUCKET, f"{OBSERVED_PREFIX}.>")
        wanted = {}
        for _, value in desired.values():
            release = DesiredRelease.model_validate_json(value)
            wanted[observed_key(release.namespace, release.release)] = release
        for key, release in wanted.items():
            if key not in observed and ready_when(release, list(wanted.values())):
                record = ObservedRelease(
                    namespace=release.namespace,
                    release=release.release,
                    run_name=release.run_name,
                    revision=release.revision,
                    saga_id=release.saga_id,
                    phase=ReleasePhase.READY,
                    url=f"http://127.0.0.1:1/{release.release}",
                )
                await bus.releases.put(key, record.model_dump_json().encode())
        for key in set(observed) - set(wanted):
            await bus.releases.delete(key)
        await asyncio.sleep(0.05)


@pytest.fixture
async def local_backend(bus: Bus) -> AsyncIterator[None]:
    task = asyncio.create_task(play_local_backend(bus))
    yield
    await cancelled(task)


@pytest.fixture
async def placements(bus: Bus) -> Placements:
    kv = await bus.js.key_value(subjects.CAPACITY_BUCKET)
    return Placements(sources={"local": LocalCapacitySource(nc=bus.nc)}, book=CapacityStore(kv))


@pytest.fixture
async def observer(placements: Placements) -> AsyncIterator[None]:
    class Catalog:
        async def all(self) -> dict[str, PlntBackendSpec]:
            return {BACKEND: LOCAL}

    stop = asyncio.Event()
    task = asyncio.create_task(
        CapacityObserver(catalog=Catalog(), placements=placements, interval_s=0.1).run(stop)
    )
    yield
    stop.set()
    await task


@pytest.fixture
def handlers(bus: Bus, placements: Placements) -> InstallerHandlers:
    return InstallerHandlers(
        bus=bus,
        backends={"local": LocalReleaseBackend(bus)},
        ready_timeout_s=10,
        uninstall_timeout_s=10,
        placements=placements,
        capacity_retry_s=0.1,
    )


def run_name(index: int) -> str:
    return f"agent-{index:02d}"


def pulled_event(index: int) -> Envelope:
    name = run_name(index)
    pulled = SpecPulled(
        run=RunSnapshot(namespace="default", name=name, generation=1, spec=SPEC),
        spec_digest="sha256:" + "0" * 64,
        workflow_name="review-responder",
        workflow_version="1.2.0",
        revision="1.2.0-g1",
        backend_name=BACKEND,
        backend=LOCAL,
    )
    return new_event(
        EventType.SPEC_PULLED,
        pulled,
        namespace="default",
        name=name,
        sagaid=f"default.{name}.1.1",
        generation=1,
        source="test",
    )


def deleted_event(index: int) -> Envelope:
    name = run_name(index)
    return new_event(
        EventType.RUN_DELETED,
        RunDeleted(),
        namespace="default",
        name=name,
        sagaid=f"default.{name}.2.1",
        generation=2,
        source="test",
    )


async def deliver(handlers: InstallerHandlers, indexes: list[int]) -> list[int]:
    """Hand the runs' spec.pulled to the handlers at once; the ones deferred."""
    handed = {index: Handed() for index in indexes}
    await asyncio.gather(
        *(handlers.handle(pulled_event(i), cast(Delivery, handed[i])) for i in indexes)
    )
    return sorted(i for i, h in handed.items() if h.deferred_s is not None)


async def installed(bus: Bus) -> set[str]:
    desired = await kv_snapshot(bus.nc, subjects.RELEASES_BUCKET, f"{DESIRED_PREFIX}.>")
    return {DesiredRelease.model_validate_json(v).run_name for _, v in desired.values()}


async def events_of(bus: Bus, kind: EventType) -> list[Envelope]:
    return [
        stored.event
        async for stored in read_events(bus.nc)
        if stored.event is not None and stored.event.event_type is kind
    ]


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"not reached within {timeout_s}s: {what}"
        await asyncio.sleep(0.05)


async def free_gpus(bus: Bus) -> int:
    entry = await (await bus.js.key_value(subjects.CAPACITY_BUCKET)).get(BACKEND)
    seen = BackendCapacity.model_validate_json(entry.value or b"").of("a100")
    assert seen is not None
    return seen.free


async def test_local_capacity_is_the_declared_capacity_less_plnt_s_releases(
    bus: Bus, placements: Placements, local_backend: None, handlers: InstallerHandlers
) -> None:
    assert await deliver(handlers, [0, 1, 2]) == []
    seen = await placements.observe(BACKEND, LOCAL)
    assert seen is not None
    a100 = seen.of("a100")
    assert a100 is not None
    assert (a100.free, a100.largest_free_on_one_node) == (GPUS - 3, GPUS - 3)


async def test_twenty_runs_on_eight_gpus_install_eight_the_rest_pending_then_placed(
    bus: Bus, local_backend: None, observer: None, handlers: InstallerHandlers
) -> None:
    await until(lambda: _has_capacity(bus), "a first capacity observation")

    pending = await deliver(handlers, list(range(RUNS)))

    running = await installed(bus)
    assert len(running) == GPUS  # no overcommit: exactly the free GPUs were booked
    assert len(pending) == RUNS - GPUS
    assert {run_name(i) for i in pending}.isdisjoint(running)
    assert len(await events_of(bus, EventType.CANARY_INSTALLED)) == GPUS
    assert await events_of(bus, EventType.RUN_FAILED) == []  # Pending, not Failed

    # a pending run's status: phase Pending, reason NoCapacity, naming the largest free
    first = run_name(pending[0])
    projection = RunProjection(namespace="default", name=first)
    for event in await events_of(bus, EventType.CAPACITY_AWAITED):
        if event.name == first:
            pulled = pulled_event(pending[0])  # the spec.pulled it answered came first
            pulled = pulled.model_copy(update={"time": event.time - timedelta(seconds=1)})
            projection = apply_event(apply_event(projection, pulled), event)
    assert projection.status.phase is Phase.PENDING
    assert Reason.NO_CAPACITY.value in projection.status.message
    assert "no node has 1 free nvidia.com/gpu (largest 0)" in projection.status.message

    # a redelivery while nothing freed places nothing more
    assert await deliver(handlers, pending) == pending
    assert len(await installed(bus)) == GPUS

    # delete four running runs: four of the pending are placed, no more
    gone = sorted(int(name.split("-")[1]) for name in running)[:4]
    for index in gone:
        await handlers.handle(deleted_event(index), cast(Delivery, Handed()))
    await until(lambda: _free_is(bus, 4), "the observer counting the four freed GPUs")
    still_pending = await deliver(handlers, pending)
    assert len(still_pending) == len(pending) - 4
    assert len(await installed(bus)) == GPUS

    # delete every running run: the eight still pending are placed
    for name in await installed(bus):
        await handlers.handle(deleted_event(int(name.split("-")[1])), cast(Delivery, Handed()))
    await until(lambda: _free_is(bus, GPUS), "the observer counting every GPU free")
    assert await deliver(handlers, still_pending) == []
    assert await installed(bus) == {run_name(i) for i in still_pending}
    assert len(await events_of(bus, EventType.CANARY_INSTALLED)) == RUNS


async def test_the_view_in_the_bucket_is_refreshed_well_within_ten_seconds(
    bus: Bus, observer: None
) -> None:
    await until(lambda: _has_capacity(bus), "a first capacity observation")
    kv = await bus.js.key_value(subjects.CAPACITY_BUCKET)
    first = BackendCapacity.model_validate_json((await kv.get(BACKEND)).value or b"")

    async def newer() -> bool:
        seen = BackendCapacity.model_validate_json((await kv.get(BACKEND)).value or b"")
        return seen.observed_at > first.observed_at

    await until(newer, "a newer observedAt", timeout_s=3)
    seen = BackendCapacity.model_validate_json((await kv.get(BACKEND)).value or b"")
    assert (datetime.now(UTC) - seen.observed_at).total_seconds() < 10


async def _has_capacity(bus: Bus) -> bool:
    stored = await kv_snapshot(bus.nc, subjects.CAPACITY_BUCKET, BACKEND)
    return BACKEND in stored


async def _free_is(bus: Bus, expected: int) -> bool:
    return await _has_capacity(bus) and await free_gpus(bus) == expected
