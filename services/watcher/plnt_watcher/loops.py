"""The watcher's two long-running loops: resources to sagas, and step deadlines."""

import asyncio
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any, NamedTuple

from plnt_common import faults
from plnt_common.bus import saga_tracing
from plnt_common.bus.bus import Bus
from plnt_common.bus.saga import advance_latest_saga, latest_saga
from plnt_common.bus.saga_events import last_of_run
from plnt_common.errors import SpecInvalid
from plnt_common.events import (
    EventType,
    RunDeleted,
    RunRequested,
    RunSnapshot,
    StepTimedOut,
    new_event,
)
from plnt_common.kube_errors import KubernetesRejected
from plnt_common.logs import get_logger
from plnt_common.metrics import SIDE_EFFECTS
from plnt_common.projection import RunProjection, saga_order
from plnt_common.resources import WorkflowRun, parse_resource
from plnt_common.tasks import discarded_on_error, until_stopped
from plnt_watcher import logic
from plnt_watcher.adapters.projections import ProjectionStore
from plnt_watcher.backoff import QUEUE_DEPTH, Backoff
from plnt_watcher.handlers import SERVICE
from plnt_watcher.ports import ResourceSource
from plnt_watcher.requests import OperatorRequests, asks_for_operation
from plnt_watcher.saga_ids import free_saga_id

log = get_logger(__name__)
PENDING_STATUS = {"phase": "Pending"}
ITEM_BACKOFF = Backoff(base_s=0.8, cap_s=30.0)
"""One object's failed handling is retried after 0.8 s, doubling to 30 s (client-go)."""
WATCH_BACKOFF = Backoff(base_s=0.5, cap_s=30.0)
"""A failed list or watch is tried again after 0.5 s, doubling to 30 s: never a hot loop."""


class _Requested(NamedTuple):
    """The saga the resource loop started for a run, and the object it rolls out."""

    uid: str
    generation: int
    saga: str


class ResourceLoop:
    """Turns resource changes into saga starts, deletions and finalizer changes."""

    def __init__(self, *, bus: Bus, source: ResourceSource, projections: ProjectionStore) -> None:
        self._bus = bus
        self._source = source
        self._projections = projections
        self._operator_requests = OperatorRequests(bus=bus, source=source, projections=projections)
        # The saga this loop requested per run, with the (uid, generation) it rolls out: the
        # echoes of its own writes before the first fold need no decision (deciding again
        # is only idempotent), and a run gone before that fold still gets its deletion.
        self._requested: dict[tuple[str, str], _Requested] = {}
        # objects whose last handling failed: their retry, the newest body seen meanwhile
        # and how often they failed in a row
        self._retries: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._waiting: dict[tuple[str, str], dict[str, Any] | None] = {}
        self._failures: dict[tuple[str, str], int] = {}

    async def run(self, stop: asyncio.Event) -> None:
        """Watch and handle until ``stop`` is set (or this task is cancelled)."""
        try:
            await until_stopped(self._watch(), stop)
        finally:
            for task in self._retries.values():
                task.cancel()
            self._retries.clear()
            self._waiting.clear()
            QUEUE_DEPTH.set(0)

    async def _watch(self) -> None:
        watch_failures = 0
        while True:
            try:
                async for namespace, name, body in self._source.watch():
                    watch_failures = 0
                    await self._handle(namespace, name, body)
            except Exception as exc:  # a broken watch is re-established; nothing is lost
                watch_failures += 1
                delay = WATCH_BACKOFF.delay(watch_failures)
                log.warning("resources.watch_restarted", error=repr(exc), delay_s=round(delay, 3))
                await asyncio.sleep(delay)

    async def _handle(self, namespace: str, name: str, body: dict[str, Any] | None) -> None:
        """Handle one change; a failure retries this object alone, with its own backoff
        (client-go's per-item rate limiter), and never restarts the watch."""
        key = (namespace, name)
        if key in self._retries:
            self._waiting[key] = body  # handled, newest first, when its retry is due
            return
        try:
            await self._on_change(namespace, name, body)
        except Exception as exc:
            self._failures[key] = self._failures.get(key, 0) + 1
            self._schedule_retry(key, body, exc)
        else:
            self._failures.pop(key, None)

    def _schedule_retry(
        self, key: tuple[str, str], body: dict[str, Any] | None, exc: Exception
    ) -> None:
        delay = ITEM_BACKOFF.delay(self._failures[key])
        log.warning(
            "resources.retry",
            namespace=key[0],
            name=key[1],
            error=repr(exc),
            failures=self._failures[key],
            delay_s=round(delay, 3),
        )
        self._waiting[key] = body
        self._retries[key] = asyncio.create_task(self._retry_later(key, delay))
        QUEUE_DEPTH.set(len(self._retries))

    async def _retry_later(self, key: tuple[str, str], delay: float) -> None:
        await asyncio.sleep(delay)
        del self._retries[key]
        QUEUE_DEPTH.set(len(self._retries))
        await self._handle(*key, self._waiting.pop(key))

    async def _on_change(self, namespace: str, name: str, body: dict[str, Any] | None) -> None:
        if body is not None and asks_for_operation(body):  # a metadata change: no generation
            await self._operator_requests.handle(namespace, name, body)
        if body is not None and logic.settled(body):
            # most changes are our own status writes: nothing to decide, but a status a
            # refused write left behind (seen again at a relist or a start) is repaired
            await self._repair_status(namespace, name, body)
            return
        if body is None:
            requested = self._requested.pop((namespace, name), None)
            projection = await self._projections.get(namespace=namespace, name=name)
            await self._on_gone(namespace, name, projection, requested.saga if requested else "")
            return
        facts = logic.ResourceFacts.from_body(body)
        requested = self._requested.get((namespace, name))
        if (
            logic.adopted(facts)
            and requested
            and (requested.uid, requested.generation) == (facts.uid, facts.generation)
        ):
            return
        projection = await self._projections.get(namespace=namespace, name=name)
        actions = logic.decide(facts, projection)
        if logic.Action.ADD_FINALIZER in actions:
            actions.remove(logic.Action.ADD_FINALIZER)
            pending = None
            if logic.Action.WRITE_PENDING in actions:
                actions.remove(logic.Action.WRITE_PENDING)  # written with the finalizer
                pending = None if body.get("status") else dict(PENDING_STATUS)
            adopt = self._source.add_finalizer(
                namespace=namespace, name=name, finalizer=logic.FINALIZER, pending_status=pending
            )
            if logic.Action.REQUEST_SAGA in actions:
                actions.remove(logic.Action.REQUEST_SAGA)
                await self._request_saga(facts, body, adopting=adopt)
            else:
                await adopt
        for action in actions:
            await self._act(action, facts, body, projection)

    async def _repair_status(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        """Write the projection's status when the resource shows another one, even at the
        current observedGeneration (a write refused through an API outage). Only for a
        run whose saga has ended: one in flight is written by its next event."""
        projection = await self._projections.get(namespace=namespace, name=name)
        if projection is None or projection.removed or projection.saga_active:
            return
        wanted = logic.status_document(projection)
        shown = body.get("status") or {}
        if all(shown.get(key) == value for key, value in wanted.items() if key != "conditions"):
            return
        log.info("status.repaired", namespace=namespace, name=name, phase=wanted.get("phase"))
        try:
            await self._source.write_status(namespace=namespace, name=name, status=wanted)
        except KubernetesRejected as exc:  # tried again at the next relist, not in a loop
            log.warning("status.refused", namespace=namespace, name=name, reason=str(exc))

    async def _on_gone(
        self,
        namespace: str,
        name: str,
        projection: RunProjection | None,
        requested_saga: str,
    ) -> None:
        """The object is gone; ``requested_saga``: the saga this loop started for it, if any."""
        if projection is None:
            # Gone before its finalizer landed and before its saga was folded: that saga
            # is still the run's latest (a deletion saga would have replaced it).
            if requested_saga and (await latest_saga(self._bus, namespace, name))[0] == (
                requested_saga
            ):
                await self._request_deletion(namespace, name, requested_saga)
            return
        if projection.removed:
            await self._projections.delete(namespace=namespace, name=name)
        elif not projection.deleting:  # deleted without our finalizer: still clean up
            await self._request_deletion(namespace, name, projection.saga_id)

    async def _act(
        self,
        action: logic.Action,
        facts: logic.ResourceFacts,
        body: dict[str, Any],
        projection: RunProjection | None,
    ) -> None:
        match action:
            case logic.Action.WRITE_PENDING:
                if not body.get("status"):
                    await self._source.write_status(
                        namespace=facts.namespace, name=facts.name, status=dict(PENDING_STATUS)
                    )
            case logic.Action.REQUEST_SAGA:
                await self._request_saga(facts, body)
            case logic.Action.REQUEST_DELETION:
                await self._request_deletion(
                    facts.namespace, facts.name, projection.saga_id if projection else ""
                )
            case logic.Action.RELEASE_FINALIZER:
                await self._source.release_finalizer(
                    namespace=facts.namespace, name=facts.name, finalizer=logic.FINALIZER
                )

    async def _request_saga(
        self,
        facts: logic.ResourceFacts,
        body: dict[str, Any],
        *,
        adopting: Coroutine[Any, Any, None] | None = None,
    ) -> None:
        """Publish the run's next saga; ``adopting``: the write that puts the finalizer on.

        The saga does not wait for that write: Pending is written only over no status, so
        a phase folded first is never overwritten, and a run deleted before its finalizer
        landed still gets its deletion saga (``_on_gone``). The write is awaited before
        return, so a failed one restarts the watch and is tried again.
        """
        try:
            run = parse_resource({k: v for k, v in body.items() if k != "status"})
        except SpecInvalid as exc:
            log.error(
                "resource.invalid", namespace=facts.namespace, name=facts.name, error=str(exc)
            )
            if adopting is not None:
                await adopting
            return
        assert isinstance(run, WorkflowRun)
        if adopting is None:
            await self._publish_saga(facts, run)
            return
        adoption = asyncio.ensure_future(adopting)
        async with discarded_on_error(adoption):
            await self._publish_saga(facts, run)
        await adoption

    async def _publish_saga(self, facts: logic.ResourceFacts, run: WorkflowRun) -> None:
        sagaid, recorded = await self._record_saga(facts)
        snapshot = RunSnapshot(
            namespace=facts.namespace,
            name=facts.name,
            uid=facts.uid,
            generation=facts.generation,
            spec=run.spec,
        )
        event = new_event(
            EventType.RUN_REQUESTED,
            RunRequested(run=snapshot),
            namespace=facts.namespace,
            name=facts.name,
            sagaid=sagaid,
            generation=facts.generation,
            source=SERVICE,
        )
        await faults.pause_point(SERVICE, EventType.RUN_REQUESTED.value, "after_effect")
        if recorded == sagaid:  # (else a newer saga is recorded, another replica saw more)
            SIDE_EFFECTS.labels(SERVICE, "saga_request").inc()
            if await self._bus.publish(event):
                log.info("saga.requested", sagaid=sagaid, generation=facts.generation)
        self._requested[(facts.namespace, facts.name)] = _Requested(
            facts.uid, facts.generation, sagaid
        )

    async def _record_saga(self, facts: logic.ResourceFacts) -> tuple[str, str]:
        """(the generation's free saga id, the run's latest saga once that id is recorded)."""
        # read at once: each is a server round trip on the way to every deploy's first event
        earlier, sagaid, latest = await asyncio.gather(
            self._requested_already(facts),
            free_saga_id(self._bus, facts.namespace, facts.name, facts.generation),
            latest_saga(self._bus, facts.namespace, facts.name),
        )
        if earlier:
            # restarted before this generation's saga was folded: ask again under its id
            # (deduplicated) while it runs, not at all once it ended; never a second saga
            ended = await self._bus.saga_ended(earlier)
            return earlier, "" if ended else latest[0]
        recorded = await advance_latest_saga(
            self._bus, facts.namespace, facts.name, sagaid, read=latest
        )
        return sagaid, recorded

    async def _requested_already(self, facts: logic.ResourceFacts) -> str:
        """The saga id this object's generation was requested under, or "" (none yet)."""
        requested = await last_of_run(
            self._bus, EventType.RUN_REQUESTED, facts.namespace, facts.name
        )
        if requested is None or requested.generation != facts.generation:
            return ""
        return requested.sagaid if requested.payload().run.uid == facts.uid else ""

    async def _request_deletion(self, namespace: str, name: str, after_saga: str) -> None:
        """Start the deletion saga above ``after_saga``, the newest known saga of the run.

        Unknown (""): a first saga (1.1) may be in flight unfolded; start above it, so the
        deletion supersedes it instead of sharing its id.
        """
        self._requested.pop((namespace, name), None)  # the deletion supersedes that saga
        generation, attempt = saga_order(after_saga) if after_saga else (1, 1)
        sagaid = await free_saga_id(self._bus, namespace, name, generation, after=attempt)
        event = new_event(
            EventType.RUN_DELETED,
            RunDeleted(),
            namespace=namespace,
            name=name,
            sagaid=sagaid,
            generation=generation,
            source=SERVICE,
        )
        if await advance_latest_saga(self._bus, namespace, name, sagaid) != sagaid:
            return
        if await self._bus.publish(event):
            log.info("saga.deletion_requested", sagaid=sagaid)


class DeadlineLoop:
    """Publishes ``step.timed_out`` once for a saga step that passed its deadline."""

    def __init__(
        self,
        *,
        bus: Bus,
        projections: ProjectionStore,
        deadlines: dict[str, float],
        interval_s: float,
    ) -> None:
        self._bus = bus
        self._projections = projections
        self._deadlines = deadlines
        self._interval_s = interval_s
        # raw bytes as they stream in; decoded only at a check, and only once per change
        self._raw: dict[str, bytes] = {}
        self._known: dict[str, tuple[bytes, RunProjection]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        follower = asyncio.create_task(self._follow())
        try:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), timeout=self._interval_s)
                except TimeoutError:
                    await self.check(datetime.now(UTC))
        finally:
            follower.cancel()

    async def _follow(self) -> None:
        while True:
            try:
                async for key, raw in self._projections.watch_raw():
                    if raw is None:
                        self._raw.pop(key, None)
                    else:
                        self._raw[key] = raw
            except Exception as exc:  # re-follow after a reconnect
                log.warning("deadlines.watch_restarted", error=repr(exc))
                await asyncio.sleep(0.5)

    def _decoded(self) -> list[RunProjection]:
        for key in set(self._known) - set(self._raw):
            del self._known[key]
        for key, raw in list(self._raw.items()):
            known = self._known.get(key)
            if known is None or known[0] is not raw:
                self._known[key] = (raw, RunProjection.model_validate_json(raw))
        return [projection for _, projection in self._known.values()]

    async def check(self, now: datetime) -> None:
        for projection in self._decoded():
            overdue = logic.overdue_phase(projection, now=now, deadlines=self._deadlines)
            if overdue is None:
                continue
            phase, deadline = overdue
            generation, _ = saga_order(projection.saga_id)
            event = new_event(
                EventType.STEP_TIMED_OUT,
                StepTimedOut(phase=phase, deadline_s=deadline),
                namespace=projection.namespace,
                name=projection.name,
                sagaid=projection.saga_id,
                generation=generation,
                source=SERVICE,
            )
            with saga_tracing.continuing(projection.saga_traceparent):
                published = await self._bus.publish(event, step=phase.lower())
            if published:
                log.warning("saga.step_timed_out", sagaid=projection.saga_id, phase=phase)
