"""Replacing a lost runner on the next backend that fits (``spec.placement.failover``).

A run whose backend reports its runner (or, with ``spread`` above 1, one copy) lost,
``RunnerFailed`` (the backend gave up restarting it), ``NoReadyPods`` (no pod of the
release is ready) or ``BackendUnreachable`` (its cluster's API is silent and the runner
does not answer either), for ``lost_after_s`` gets a new saga of the same generation. Its
``run.requested`` names the lost backends (``lost``) and the ones whose copy keeps
serving (``kept``): the puller passes over both, the installer places the missing copies
on the next backends with room, the smoke test checks them and the promoter promotes them
at once beside the kept copies (the revision was judged already). Promotion retires the
lost copies; until then nothing is removed from a lost backend.

Only a settled run is replaced: Ready, no saga in flight. A replacement that fails ends
the way any saga does and is not tried again for that saga.
"""

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from plnt_common.bus.bus import Bus
from plnt_common.bus.saga import advance_latest_saga, latest_saga
from plnt_common.bus.saga_events import last_of_run
from plnt_common.events import EventType, RunRequested, RunSnapshot, new_event
from plnt_common.logs import get_logger
from plnt_common.metrics import SIDE_EFFECTS
from plnt_common.projection import RunProjection, saga_order
from plnt_common.resources import PlacementEntry
from plnt_common.status import Phase, ServingReason
from plnt_watcher.adapters.projections import ProjectionStore
from plnt_watcher.handlers import SERVICE
from plnt_watcher.saga_ids import free_saga_id
from plnt_watcher.serving import Serving

log = get_logger(__name__)

LOST_REASONS = frozenset(
    {
        ServingReason.RUNNER_FAILED.value,
        ServingReason.NO_READY_PODS.value,
        ServingReason.BACKEND_UNREACHABLE.value,
    }
)
"""Serving reasons that mean the backend will not bring the runner back by itself soon;
``RunnerStarting`` (a restart under way) is not one."""
CHECK_INTERVAL_S = 1.0


@dataclass(frozen=True)
class Replacement:
    """A settled run to replace: its snapshot, the saga it replaces, the backends whose
    copy is lost and those whose copy keeps serving (a spread run's others)."""

    snapshot: RunSnapshot
    replaces: str
    lost: tuple[PlacementEntry, ...]
    kept: tuple[PlacementEntry, ...] = ()


def is_lost(serving: Serving) -> bool:
    """The route reports the run's runner, or one of its copies, lost for good."""
    if not serving.ok:
        return serving.reason in LOST_REASONS
    return any(reason in LOST_REASONS for _, reason in serving.lost)


def _lost_reasons(serving: Serving, placed: list[str]) -> dict[str, str]:
    """Backend -> the reason its copy is lost: every one when none serves."""
    if not serving.ok:
        if serving.reason not in LOST_REASONS:
            return {}
        detail = f" ({serving.message})" if serving.message else ""
        return dict.fromkeys(placed, f"{serving.reason}{detail}")
    return {b: r for b, r in serving.lost if r in LOST_REASONS and b in placed}


def replacement_of(
    projection: RunProjection | None, snapshot: RunSnapshot | None, serving: Serving
) -> Replacement | str:
    """What to request for a run whose runner is down as ``serving`` says, or why nothing."""
    if projection is None or snapshot is None:
        return "no projection of the run yet"
    if projection.saga_active or projection.status.phase is not Phase.READY:
        return f"the run is {projection.status.phase.value}, not a settled Ready"
    if snapshot.generation != projection.generation:
        return "a newer generation is being requested"
    placement = snapshot.spec.placement
    if placement is None or not placement.failover:
        return "spec.placement.failover is off"
    placed = [e.backend for e in projection.status.placement if e.state == "Serving"]
    lost = _lost_reasons(serving, placed)
    if not lost:
        return "no copy in status.placement is lost for good"
    if placement.backends is not None and set(placement.backends) <= set(placed):
        return "spec.placement lists no other backend"
    return Replacement(
        snapshot=snapshot,
        replaces=projection.saga_id,
        lost=tuple(
            PlacementEntry(
                backend=backend,
                state="Lost",
                reason=f"{reason}: replaced on the next backend that fits",
            )
            for backend, reason in lost.items()
        ),
        kept=tuple(
            PlacementEntry(backend=backend, state="Serving")
            for backend in placed
            if backend not in lost
        ),
    )


class ReplacementLoop:
    """Checks every ``interval_s`` the runs whose stable the route reports lost."""

    def __init__(
        self,
        *,
        bus: Bus,
        projections: ProjectionStore,
        serving: Callable[[], dict[tuple[str, str], Serving]],
        lost_after_s: float,
        interval_s: float = CHECK_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._bus = bus
        self._projections = projections
        self._serving = serving
        self._lost_after_s = lost_after_s
        self._interval_s = interval_s
        self._clock = clock
        self._lost_since: dict[tuple[str, str], float] = {}
        self._requested: dict[tuple[str, str], str] = {}
        """Per run, the saga a replacement was requested for: asked once per saga."""

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.check()
            except Exception as exc:  # NATS away: the next round checks again
                log.warning("replacement.check_failed", error=repr(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self._interval_s)

    async def check(self) -> None:
        now = self._clock()
        lost = {run: serving for run, serving in self._serving().items() if is_lost(serving)}
        for run in set(self._lost_since) - set(lost):
            del self._lost_since[run]
        for run, serving in sorted(lost.items()):
            since = self._lost_since.setdefault(run, now)
            if now - since >= self._lost_after_s:
                await self._replace(run, serving)

    async def _replace(self, run: tuple[str, str], serving: Serving) -> None:
        namespace, name = run
        projection, _ = await self._projections.read(namespace=namespace, name=name)
        if projection is not None and self._requested.get(run) == projection.saga_id:
            return  # requested already: the run stays lost until its replacement serves
        requested = await last_of_run(self._bus, EventType.RUN_REQUESTED, namespace, name)
        snapshot = requested.payload().run if requested is not None else None
        decided = replacement_of(projection, snapshot, serving)
        if isinstance(decided, str):
            log.debug("replacement.not_requested", namespace=namespace, name=name, why=decided)
            return
        self._requested[run] = decided.replaces
        await self._request(decided)

    async def _request(self, replacement: Replacement) -> None:
        snapshot = replacement.snapshot
        namespace, name = snapshot.namespace, snapshot.name
        generation, attempt = saga_order(replacement.replaces)
        latest, sagaid = await asyncio.gather(
            latest_saga(self._bus, namespace, name),
            free_saga_id(self._bus, namespace, name, generation, after=attempt),
        )
        if latest[0] != replacement.replaces:
            log.info("replacement.not_requested", why=f"a newer saga {latest[0]} is recorded")
            return
        if await advance_latest_saga(self._bus, namespace, name, sagaid, read=latest) != sagaid:
            return
        event = new_event(
            EventType.RUN_REQUESTED,
            RunRequested(run=snapshot, lost=replacement.lost, kept=replacement.kept),
            namespace=namespace,
            name=name,
            sagaid=sagaid,
            generation=generation,
            source=SERVICE,
        )
        SIDE_EFFECTS.labels(SERVICE, "replacement_request").inc()
        if await self._bus.publish(event):
            log.warning(
                "saga.replacement_requested",
                sagaid=sagaid,
                lost=[entry.backend for entry in replacement.lost],
                reasons=[entry.reason for entry in replacement.lost],
            )
