"""The watcher's event handler and resource loop against a real nats-server."""

import asyncio
import dataclasses
from typing import Any, cast

import pytest
from nats.js.kv import KeyValue

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.bus.history import read_events
from plnt_common.events import (
    Envelope,
    EventType,
    RunFailed,
    RunSnapshot,
    SpecPulled,
    follow_up,
)
from plnt_common.projection import apply_event, empty_projection
from plnt_common.resource_store import ResourceStore, StoredObject
from plnt_common.resources import PlntBackendSpec, WorkflowRunSpec, parse_resource
from plnt_common.status import Phase, Reason
from plnt_testkit.events import run_requested
from plnt_watcher.adapters.embedded_source import EmbeddedSource
from plnt_watcher.adapters.projections import ProjectionStore
from plnt_watcher.handlers import ProjectionHandlers
from plnt_watcher.logic import FINALIZER, status_document
from plnt_watcher.loops import ResourceLoop

SPEC = WorkflowRunSpec.model_validate(
    {"workflow": {"ref": "wf@1.0.0", "registry": "file:///registry"}, "backend": {"cluster": "c"}}
)


async def apply_run(store: ResourceStore, name: str) -> StoredObject:
    """A new WorkflowRun ``name`` in ``default``, as ``plnt apply`` stores it."""
    document = {
        "apiVersion": "plnt.work/v1",
        "kind": "WorkflowRun",
        "metadata": {"name": name},
        "spec": SPEC.model_dump(mode="json", by_alias=True, exclude_none=True),
    }
    created, _ = await store.apply(parse_resource(document))
    return created


async def fresh_run(bus: Bus, name: str) -> tuple[ResourceStore, StoredObject]:
    """A new WorkflowRun ``name``, whatever an earlier test left under that name."""
    store = ResourceStore(bus)
    await bus.resources.purge(f"workflowruns.default.{name}")
    return store, await apply_run(store, name)


async def run_events(bus: Bus, name: str) -> list[Envelope]:
    """The stored events of run ``default/name``, oldest first."""
    return [
        stored.event
        async for stored in read_events(bus.nc, filter_subject=subjects.run_filter("default", name))
        if stored.event is not None
    ]


class RecordingStatus:
    """Stands in for ConvergingStatus at our own port: records what would be written."""

    def __init__(self) -> None:
        self.writes: list[dict[str, Any]] = []

    async def write_folded(
        self, *, namespace: str, name: str, status: dict[str, Any], revision: int
    ) -> bool:
        self.writes.append(status)
        return True

    async def release_finalizer(self, *, namespace: str, name: str, finalizer: str) -> None:
        raise AssertionError("not removed")


def requested_event(name: str) -> Envelope:
    return run_requested(RunSnapshot(namespace="default", name=name, generation=1, spec=SPEC))


def pulled_event(requested: Envelope) -> Envelope:
    return follow_up(
        requested,
        EventType.SPEC_PULLED,
        SpecPulled(
            run=requested.payload().run,
            spec_digest="sha256:" + "a" * 64,
            workflow_name="wf",
            workflow_version="1.0.0",
            revision="1.0.0-g1",
            backend_name="c",
            backend=PlntBackendSpec(type="local"),
        ),
        source="test",
    )


DELIVERY = Delivery(msg=None, attempt=1)  # type: ignore[arg-type]


def resource_loop(bus: Bus, store: ResourceStore) -> ResourceLoop:
    """The watcher's resource loop over the embedded store."""
    return ResourceLoop(
        bus=bus, source=EmbeddedSource(store), projections=ProjectionStore(bus.runs)
    )


def recording_handlers(
    bus: Bus, status: "RecordingStatus", *, status_linger_s: float = 0.0
) -> ProjectionHandlers:
    """A watcher replica's event handler with its own projection copies."""
    return ProjectionHandlers(
        bus=bus,
        projections=ProjectionStore(bus.runs),
        source=status,  # type: ignore[arg-type]
        status_linger_s=status_linger_s,
    )


def awaiting_successor() -> tuple[Delivery, asyncio.Future[None]]:
    """A delivery of an ordered consumer, and the future its run's next event resolves."""
    followed = asyncio.get_running_loop().create_future()
    return dataclasses.replace(DELIVERY, followed=followed), followed


async def test_a_redelivered_event_writes_the_status_again(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    status = RecordingStatus()
    handlers = recording_handlers(bus, status)
    event = requested_event("wf")
    pulled = pulled_event(event)
    await handlers.handle(event, DELIVERY)
    await handlers.handle(pulled, DELIVERY)
    # the first delivery folded the event, then its status write failed; it comes back
    await handlers.handle(pulled, DELIVERY)
    assert [w["phase"] for w in status.writes] == ["Pulling", "Installing", "Installing"]
    await bus.close()


async def test_a_status_is_left_to_the_next_event_of_the_run_queued_behind(
    nats_url: str,
) -> None:
    bus = await Bus.open(nats_url, service="test")
    status = RecordingStatus()
    handlers = recording_handlers(bus, status)
    requested = requested_event("queued")
    delivery, followed = awaiting_successor()
    followed.set_result(None)
    await handlers.handle(requested, delivery)
    assert status.writes == []  # folded, its status left to the next delivery
    await handlers.handle(pulled_event(requested), DELIVERY)
    assert [w["phase"] for w in status.writes] == ["Installing"]
    projection, _ = await ProjectionStore(bus.runs).read(namespace="default", name="queued")
    assert projection is not None and projection.status.phase == Phase.INSTALLING
    await bus.close()


async def test_a_step_status_lingers_for_the_next_event_of_the_run(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    status = RecordingStatus()
    handlers = recording_handlers(bus, status, status_linger_s=30.0)
    requested = requested_event("lingering")
    delivery, followed = awaiting_successor()
    handling = asyncio.create_task(handlers.handle(requested, delivery))
    await asyncio.sleep(0.05)
    assert not handling.done()  # folded, its delivery held while the status lingers
    followed.set_result(None)  # the run's next event arrived: it writes the status
    await asyncio.wait_for(handling, timeout=5)
    await handlers.handle(pulled_event(requested), DELIVERY)
    assert [w["phase"] for w in status.writes] == ["Installing"]
    await bus.close()


async def test_a_step_status_is_written_when_no_next_event_comes(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    status = RecordingStatus()
    handlers = recording_handlers(bus, status, status_linger_s=0.05)
    delivery, _ = awaiting_successor()  # nothing follows
    await handlers.handle(requested_event("alone"), delivery)
    assert [w["phase"] for w in status.writes] == ["Pulling"]
    await bus.close()


async def test_an_end_is_written_at_once_whatever_the_linger(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    status = RecordingStatus()
    handlers = recording_handlers(bus, status, status_linger_s=3600.0)
    requested = requested_event("ending")
    await handlers.handle(requested, DELIVERY)  # no ordered consumer: nothing to wait for
    failed = follow_up(
        requested,
        EventType.RUN_FAILED,
        RunFailed(reason=Reason.SPEC_INVALID, message="bad", phase=Phase.PULLING),
        source="test",
    )
    delivery, _ = awaiting_successor()
    await asyncio.wait_for(handlers.handle(failed, delivery), timeout=5)
    assert [w["phase"] for w in status.writes] == ["Pulling", "Failed"]
    await bus.close()


async def test_a_fold_that_lost_to_another_replica_is_folded_again_over_its_write(
    nats_url: str,
) -> None:
    bus = await Bus.open(nats_url, service="test")
    await bus.runs.purge("default.raced")
    mine = RecordingStatus()
    replica = recording_handlers(bus, mine)
    other = recording_handlers(bus, RecordingStatus())
    requested = requested_event("raced")
    pulled = pulled_event(requested)
    failed = follow_up(
        pulled,
        EventType.RUN_FAILED,
        RunFailed(reason=Reason.INSTALL_FAILED, message="no", phase=Phase.INSTALLING),
        source="test",
    )
    await replica.handle(requested, DELIVERY)
    await other.handle(pulled, DELIVERY)  # the replica's own copy is now one write behind
    await replica.handle(failed, DELIVERY)

    expected = empty_projection("default", "raced")
    for event in (requested, pulled, failed):
        expected = apply_event(expected, event)
    stored = await ProjectionStore(bus.runs).get(namespace="default", name="raced")
    assert stored == expected
    # its stale copy's fold was never written: the status is that of all three events
    assert mine.writes == [
        status_document(apply_event(empty_projection("default", "raced"), requested)),
        status_document(expected),
    ]
    await bus.close()


class CountingReads:
    """The real ``plnt-runs`` handle, counting its reads (a spy: every call goes through)."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv
        self.gets = 0

    async def get(self, key: str) -> KeyValue.Entry:
        self.gets += 1
        return await self._kv.get(key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kv, name)


async def test_a_new_run_s_first_fold_creates_its_projection_without_reading_it_again(
    nats_url: str,
) -> None:
    bus = await Bus.open(nats_url, service="test")
    await bus.runs.purge("default.unread")
    reads = CountingReads(bus.runs)
    projections = ProjectionStore(cast(KeyValue, reads))
    assert await projections.get(namespace="default", name="unread") is None  # the loop's
    requested = requested_event("unread")
    folded, changed, _ = await projections.fold(requested)
    assert changed and folded == apply_event(empty_projection("default", "unread"), requested)
    assert reads.gets == 1
    assert await ProjectionStore(bus.runs).get(namespace="default", name="unread") == folded
    await bus.close()


async def test_a_fold_after_a_read_another_replica_outdated_folds_over_the_newer_write(
    nats_url: str,
) -> None:
    bus = await Bus.open(nats_url, service="test")
    await bus.runs.purge("default.outread")
    mine, other = ProjectionStore(bus.runs), ProjectionStore(bus.runs)
    assert await mine.get(namespace="default", name="outread") is None
    requested = requested_event("outread")
    pulled = pulled_event(requested)
    await other.fold(requested)  # created since this replica read that there was none
    folded, changed, _ = await mine.fold(pulled)
    assert changed
    assert folded == apply_event(
        apply_event(empty_projection("default", "outread"), requested), pulled
    )
    assert await other.get(namespace="default", name="outread") == folded
    await bus.close()


class CountingBus(Bus):
    """The real bus, counting publishes (our own adapter boundary)."""

    published: int = 0

    async def publish(
        self, envelope: Envelope, *, step: str = "", deadline_s: float = 60.0
    ) -> bool:
        self.published += 1
        return await super().publish(envelope, step=step, deadline_s=deadline_s)


async def test_a_new_run_is_adopted_in_one_write_and_its_echoes_start_nothing(
    nats_url: str,
) -> None:
    opened = await Bus.open(nats_url, service="test")
    bus = CountingBus(**{f.name: getattr(opened, f.name) for f in dataclasses.fields(Bus)})
    store, created = await fresh_run(bus, "adopted")
    loop = resource_loop(bus, store)
    await loop._on_change("default", "adopted", created.body)
    adopted = await store.get("WorkflowRun", "default", "adopted")
    assert adopted is not None
    assert adopted.revision == created.revision + 1  # finalizer and Pending together
    assert adopted.body["status"] == {"phase": "Pending"}
    assert adopted.body["metadata"]["finalizers"] == [FINALIZER]
    assert bus.published == 1
    await loop._on_change("default", "adopted", adopted.body)  # the echo of that write
    assert bus.published == 1
    again = await store.get("WorkflowRun", "default", "adopted")
    assert again is not None and again.revision == adopted.revision
    await opened.close()


class HeldFinalizers(EmbeddedSource):
    """The embedded source whose finalizer writes wait for ``release`` (our own port)."""

    def __init__(self, store: ResourceStore, *, fail: bool = False) -> None:
        super().__init__(store)
        self.release = asyncio.Event()
        self._fail = fail

    async def add_finalizer(self, **kwargs: Any) -> None:
        await self.release.wait()
        if self._fail:
            raise ConnectionError("the store went away")
        await super().add_finalizer(**kwargs)


async def test_a_new_run_s_saga_starts_without_waiting_for_its_finalizer_write(
    nats_url: str,
) -> None:
    bus = await Bus.open(nats_url, service="test")
    store, created = await fresh_run(bus, "eager")
    source = HeldFinalizers(store)
    loop = ResourceLoop(bus=bus, source=source, projections=ProjectionStore(bus.runs))
    deciding = asyncio.create_task(loop._on_change("default", "eager", created.body))
    for _ in range(250):  # the stream is polled: up to 5 s for run.requested
        if await run_events(bus, "eager"):
            break
        await asyncio.sleep(0.02)
    assert await run_events(bus, "eager"), "run.requested waited for the finalizer write"
    assert not deciding.done()  # the change is handled once the finalizer is on
    source.release.set()
    await asyncio.wait_for(deciding, timeout=5)
    adopted = await store.get("WorkflowRun", "default", "eager")
    assert adopted is not None and adopted.body["metadata"]["finalizers"] == [FINALIZER]
    assert adopted.body["status"] == {"phase": "Pending"}
    await bus.close()


async def test_a_failed_finalizer_write_fails_the_change_and_a_retry_starts_no_second_saga(
    nats_url: str,
) -> None:
    bus = await Bus.open(nats_url, service="test")
    store, created = await fresh_run(bus, "retried")
    failing = HeldFinalizers(store, fail=True)
    failing.release.set()
    loop = ResourceLoop(bus=bus, source=failing, projections=ProjectionStore(bus.runs))
    with pytest.raises(ConnectionError):  # the watch restarts and sees the run again
        await loop._on_change("default", "retried", created.body)
    await resource_loop(bus, store)._on_change("default", "retried", created.body)
    events = await run_events(bus, "retried")
    assert [(e.event_type, e.sagaid) for e in events] == [
        (EventType.RUN_REQUESTED, "default.retried.1.1")
    ]
    adopted = await store.get("WorkflowRun", "default", "retried")
    assert adopted is not None and adopted.body["metadata"]["finalizers"] == [FINALIZER]
    await bus.close()


async def test_a_run_gone_before_its_saga_was_folded_still_gets_its_deletion(
    nats_url: str,
) -> None:
    bus = await Bus.open(nats_url, service="test")
    store, created = await fresh_run(bus, "short-lived")
    loop = resource_loop(bus, store)
    await loop._on_change("default", "short-lived", created.body)
    # the watch reports it gone while nothing has folded its saga into plnt-runs yet
    await loop._on_change("default", "short-lived", None)
    events = await run_events(bus, "short-lived")
    assert [(e.event_type, e.sagaid) for e in events] == [
        (EventType.RUN_REQUESTED, "default.short-lived.1.1"),
        (EventType.RUN_DELETED, "default.short-lived.1.2"),
    ]
    await bus.close()


async def test_a_run_deleted_the_usual_way_gets_one_deletion_saga(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    store = ResourceStore(bus)
    created = await apply_run(store, "deleted")
    loop = resource_loop(bus, store)
    await loop._on_change("default", "deleted", created.body)
    assert await store.delete("WorkflowRun", "default", "deleted") == "deleting"
    marked = await store.get("WorkflowRun", "default", "deleted")
    assert marked is not None
    await loop._on_change("default", "deleted", marked.body)  # deletionTimestamp: delete
    # the removal completed (the projection was dropped with it) and the object is gone
    await loop._on_change("default", "deleted", None)
    events = await run_events(bus, "deleted")
    assert [(e.event_type, e.sagaid) for e in events] == [
        (EventType.RUN_REQUESTED, "default.deleted.1.1"),
        (EventType.RUN_DELETED, "default.deleted.1.2"),
    ]
    await bus.close()


@pytest.mark.parametrize("ended", [True, False], ids=["saga-ended", "saga-in-flight"])
async def test_a_watcher_restarted_before_folding_its_saga_starts_no_second_one(
    nats_url: str, ended: bool
) -> None:
    """Killed right after it requested a run's saga: the new process sees the run with no
    projection yet. It must ask under the same saga id (or not at all once that saga
    ended), never start attempt 2 of the same generation."""
    bus = await Bus.open(nats_url, service="test")
    name = f"restarted-{'ended' if ended else 'running'}"
    await bus.runs.purge(f"default.{name}")
    store, created = await fresh_run(bus, name)
    await resource_loop(bus, store)._on_change("default", name, created.body)
    (first,) = await run_events(bus, name)
    if ended:
        failed = RunFailed(reason=Reason.SPEC_INVALID, message="bad spec")
        assert await bus.publish_terminal(
            follow_up(first, EventType.RUN_FAILED, failed, source="test")
        )
    adopted = await store.get("WorkflowRun", "default", name)
    assert adopted is not None

    await resource_loop(bus, store)._on_change("default", name, adopted.body)  # a new process

    sagas = [e.sagaid for e in await run_events(bus, name)]
    assert set(sagas) == {f"default.{name}.1.1"}, sagas
    await bus.close()


async def test_a_run_created_again_under_its_old_name_gets_its_own_saga(nats_url: str) -> None:
    """The same name and generation 1 again, but another object (uid): its saga is new."""
    bus = await Bus.open(nats_url, service="test")
    name = "created-again"
    await bus.runs.purge(f"default.{name}")
    store, created = await fresh_run(bus, name)
    await resource_loop(bus, store)._on_change("default", name, created.body)
    (first,) = await run_events(bus, name)
    failed = RunFailed(reason=Reason.SPEC_INVALID, message="bad spec")
    assert await bus.publish_terminal(follow_up(first, EventType.RUN_FAILED, failed, source="t"))

    store, again = await fresh_run(bus, name)  # purged and applied: a new uid
    assert again.body["metadata"]["uid"] != created.body["metadata"]["uid"]
    await resource_loop(bus, store)._on_change("default", name, again.body)

    requested = [e for e in await run_events(bus, name) if e.event_type is EventType.RUN_REQUESTED]
    assert [e.sagaid for e in requested] == [f"default.{name}.1.1", f"default.{name}.1.2"]
    await bus.close()
