"""Installer handlers: install canaries, compensate them, retire and remove releases."""

import asyncio
import time

from plnt_common import faults
from plnt_common.bus.bus import Bus, content_step
from plnt_common.bus.consumer import Delivery
from plnt_common.bus.saga import latest_saga, observe_saga
from plnt_common.bus.saga_events import last_of_saga
from plnt_common.errors import InstallFailed
from plnt_common.events import (
    AnalysisVerdict,
    CanaryInstalled,
    CanaryRef,
    CapacityAwaited,
    Envelope,
    EventType,
    RouteRestored,
    RunFailed,
    RunReady,
    RunRemoved,
    RunReverted,
    RunRolledBack,
    SpecPulled,
    SpreadRelease,
    StepTimedOut,
    follow_up,
)
from plnt_common.events import (
    InstallFailed as InstallFailedEvent,
)
from plnt_common.logs import get_logger
from plnt_common.messages import SUPERSEDED, deadline_passed
from plnt_common.metrics import SIDE_EFFECTS
from plnt_common.releases import DesiredRelease, ObservedRelease, ReleaseRole, release_name
from plnt_common.resources import PlacementEntry
from plnt_common.saga import SagaState
from plnt_common.status import Phase, Reason
from plnt_installer import keep, logic
from plnt_installer.capacity import Refusal
from plnt_installer.placement import Placements
from plnt_installer.ports import ReleaseBackend, ReleasesUnreadable
from plnt_installer.silent_backends import come_back_for, removed_while_waiting, wait_to_end

log = get_logger(__name__)
SERVICE = "installer"
Serving = tuple[ReleaseBackend, SpecPulled, DesiredRelease, ObservedRelease]
"""A canary copy that serves: its backend, the pulled spec narrowed to it, the release."""
COMPENSATED_TIMEOUTS = {Phase.PULLING.value, Phase.INSTALLING.value}
CAPACITY_RETRY_S = 5.0
"""How soon a canary that fits no node is tried again (the capacity view's refresh)."""


class InstallerHandlers:
    def __init__(
        self,
        *,
        bus: Bus,
        backends: dict[str, ReleaseBackend],
        ready_timeout_s: float | None,
        uninstall_timeout_s: float,
        placements: Placements | None = None,
        capacity_retry_s: float = CAPACITY_RETRY_S,
    ) -> None:
        self._bus = bus
        self._backends = backends
        self._ready_timeout_s = ready_timeout_s
        self._uninstall_timeout_s = uninstall_timeout_s
        self._placements = placements
        self._capacity_retry_s = capacity_retry_s
        self._awaited: dict[str, str] = {}
        """Per saga, the last Pending message published (a retry repeats it only if new)."""

    async def handle(self, event: Envelope, delivery: Delivery) -> None:
        match event.event_type:
            case EventType.SPEC_PULLED:
                await self._install(event, delivery)
            case EventType.ANALYSIS_PASSED:
                await self._install_next(event, delivery)
            case EventType.INSTALL_FAILED:
                data: InstallFailedEvent = event.payload()
                await self._compensate(event, delivery, data.reason, data.message)
            case EventType.ROUTE_RESTORED:
                restored: RouteRestored = event.payload()
                await self._compensate(event, delivery, restored.reason, restored.message)
            case EventType.STEP_TIMED_OUT:
                timed_out: StepTimedOut = event.payload()
                if timed_out.phase in COMPENSATED_TIMEOUTS:
                    message = deadline_passed(timed_out.phase, timed_out.deadline_s)
                    await self._compensate(event, delivery, Reason.STEP_TIMED_OUT, message)
            case EventType.RUN_READY:
                await self._retire_old(event, delivery)
            case EventType.RUN_REVERTED:
                await self._retire_reverted(event, delivery)
            case EventType.RUN_DELETED:
                await self._remove_all(event, delivery)

    async def on_exhausted(self, event: Envelope, exc: BaseException) -> None:
        message = f"installer gave up after repeated errors: {exc}"
        if event.event_type is EventType.SPEC_PULLED:
            data: SpecPulled = event.payload()
            failed = InstallFailedEvent(
                reason=Reason.DELIVERY_EXHAUSTED,
                message=message,
                revision=data.revision,
                release=release_name(event.namespace, event.name, event.generation),
            )
            await self._bus.publish(
                follow_up(event, EventType.INSTALL_FAILED, failed, source=SERVICE)
            )
        elif event.event_type is EventType.ANALYSIS_PASSED:
            verdict: AnalysisVerdict = event.payload()
            failed = InstallFailedEvent(
                reason=Reason.DELIVERY_EXHAUSTED,
                message=message,
                revision=verdict.canary.revision,
                release=verdict.canary.release,
                backend=verdict.next_to_install(),
            )
            await self._bus.publish(
                follow_up(event, EventType.INSTALL_FAILED, failed, source=SERVICE)
            )
        elif event.event_type in (
            EventType.INSTALL_FAILED,
            EventType.ROUTE_RESTORED,
            EventType.STEP_TIMED_OUT,
        ):
            await self._end_failed(event, Reason.DELIVERY_EXHAUSTED, message, stable="")
        elif event.event_type is EventType.RUN_DELETED:
            await self._bus.publish_terminal(
                follow_up(event, EventType.RUN_REMOVED, RunRemoved(), source=SERVICE)
            )

    async def _held(
        self, namespace: str, run_name: str
    ) -> list[tuple[ReleaseBackend, DesiredRelease]]:
        """Every release of the run, with the backend holding it.

        Events after spec.pulled do not say which backend a run's releases are on (and a
        run may have moved between PlntBackends across generations), so each is asked.
        """
        held, silent = await self._held_reachable(namespace, run_name)
        if silent:
            raise ReleasesUnreadable(found=[release for _, release in held], backends=silent)
        return held

    async def _held_reachable(
        self, namespace: str, run_name: str
    ) -> tuple[list[tuple[ReleaseBackend, DesiredRelease]], tuple[str, ...]]:
        """``_held`` on the PlntBackends that answer, and the names of those that did not."""
        held: list[tuple[ReleaseBackend, DesiredRelease]] = []
        silent: tuple[str, ...] = ()
        for backend in self._backends.values():
            try:
                releases = await backend.releases(namespace=namespace, run_name=run_name)
            except ReleasesUnreadable as exc:
                releases, silent = exc.found, silent + exc.backends
            held.extend((backend, release) for release in releases)
        return held, silent

    async def _install(self, event: Envelope, delivery: Delivery) -> None:
        """spec.pulled: install the canary on each backend placed (``spec.placement.spread``
        of them), wait until every copy serves, publish canary.installed. A walk installs
        its first backend's copy only (``_install_next`` the others, in turn)."""
        data: SpecPulled = event.payload()
        if not await self._may_install(event):
            self._awaited.pop(event.sagaid, None)  # a Pending saga superseded or ended
            return
        placed = await self.place(event, data, delivery)
        if placed is None:
            return
        copies, placement = placed
        if await self._choose_backend(event, copies[0]) is None:
            return
        walk = await self._walk_of(event, data, copies)
        if walk:  # the later copies are placed again when the walk reaches them
            for later in copies[1:]:
                await self._unreserve(
                    later, logic.desired_canary(later, saga_id=event.sagaid, spread=True)
                )
            copies, placement = copies[:1], logic.walk_placement(placement, walk)
        wanted = [
            (copy, logic.desired_canary(copy, saga_id=event.sagaid, spread=index > 0))
            for index, copy in enumerate(copies)
        ]
        serving = await self._install_copies(event, wanted)
        if serving is None:  # install.failed is published: its compensation removes them all
            for unbooked, unwanted in wanted:
                await self._unreserve(unbooked, unwanted)
            return
        if self._placements is not None:
            for _, copy, desired, _ in serving:
                await self._placements.mark_up(backend_name=copy.backend_name, canary=desired)
        self._awaited.pop(event.sagaid, None)
        if not await self._still_wanted(event, [(b, c, d) for b, c, d, _ in serving]):
            return
        await self._publish_installed(event, data, serving, placement, walk)

    async def _walk_of(
        self, event: Envelope, data: SpecPulled, copies: tuple[SpecPulled, ...]
    ) -> tuple[str, ...]:
        """The backends a rollout walks one at a time (``canary_walk``): every copy's,
        when several replace a stable revision with canary steps; () otherwise."""
        if len(copies) < 2 or not data.run.spec.canary.steps or data.replacing():
            return ()
        held = await self._held(event.namespace, event.name)
        if not logic.stable_revision([r for _, r in held], excluding_saga=event.sagaid):
            return ()
        return tuple(copy.backend_name for copy in copies)

    async def _install_next(self, event: Envelope, delivery: Delivery) -> None:
        """analysis.passed ending a walked backend's steps: place and install the walk's
        next copy, wait until it serves, publish canary.installed for it (its smoke test
        and steps follow). A backend with no room now is tried again every
        ``capacity_retry_s`` (the Installing deadline bounds the wait); a failure is
        install.failed, on which the promoter takes the canary out of the route first."""
        verdict: AnalysisVerdict = event.payload()
        name = verdict.next_to_install()
        if not name:
            return
        continued = await self._walk_continues(event, name)
        if continued is None:
            return
        copy, earlier = continued
        desired = logic.desired_canary(copy, saga_id=event.sagaid, spread=True)
        backend = self._backends[copy.backend.type]  # the walk holds driven backends only
        refusal = (
            None
            if self._placements is None
            else await self._placements.reserve(
                backend_name=name, spec=copy.backend, canary=desired
            )
        )
        if refusal is not None:
            log.info("walk.awaiting_capacity", backend=name, message=refusal.message)
            delivery.defer(self._capacity_retry_s)
            return
        outcome: ObservedRelease | InstallFailed | None = None
        if await self._install_canary(event, copy, backend, desired):
            outcome = await self._ready_or_failure(event, backend, copy, desired)
            if isinstance(outcome, InstallFailed):
                await self._publish_install_failed(event, desired, outcome)
        if not isinstance(outcome, ObservedRelease):
            await self._unreserve(copy, desired)
            return
        if self._placements is not None:
            await self._placements.mark_up(backend_name=name, canary=desired)
        if await observe_saga(self._bus, event) is not SagaState.CURRENT:
            # the promoter's restore (or a newer saga) ends it; this copy goes with it
            await backend.uninstall(
                namespace=desired.namespace,
                release=desired.release,
                timeout_s=self._uninstall_timeout_s,
                pulled=copy,
            )
            log.info("walk.not_continued", reason="saga superseded or ended", backend=name)
            return
        added = SpreadRelease(backend=name, release=desired.release, url=outcome.url)
        canary = earlier.canary.model_copy(update={"spread": (*earlier.canary.spread, added)})
        await faults.pause_point(SERVICE, event.event_type.value, "after_effect")
        next_copy = CanaryInstalled(
            run=earlier.run,
            canary=canary,
            backend=name,
            placement=logic.walk_reached(earlier.placement, name),
        )
        await self._bus.publish(
            follow_up(event, EventType.CANARY_INSTALLED, next_copy, source=SERVICE), step=name
        )
        log.info("canary.installed", release=desired.release, url=outcome.url, walk=name)

    async def _walk_continues(
        self, event: Envelope, name: str
    ) -> tuple[SpecPulled, CanaryInstalled] | None:
        """The spec.pulled narrowed to the walk's next backend ``name``, with the saga's
        last canary.installed; None when the walk does not go on there (the saga ended or
        was superseded, or a redelivery finds the copy installed already)."""
        if await observe_saga(self._bus, event) is not SagaState.CURRENT:
            log.info("walk.not_continued", reason="saga superseded or ended", backend=name)
            return None
        pulled, installed = await asyncio.gather(
            self._pulled(event), last_of_saga(self._bus, EventType.CANARY_INSTALLED, event)
        )
        if pulled is None or installed is None:
            log.info("walk.not_continued", reason="a newer spec was pulled", backend=name)
            return None
        earlier: CanaryInstalled = installed.payload()
        if name in earlier.canary.copies():  # a redelivery once canary.installed was out
            log.info("walk.already_installed", backend=name)
            return None
        choice = next(c for c in pulled.choices() if c.backend_name == name)
        copy = pulled.model_copy(update={"backend_name": name, "backend": choice.backend})
        return copy, earlier

    async def _install_copies(
        self, event: Envelope, wanted: list[tuple[SpecPulled, DesiredRelease]]
    ) -> list[Serving] | None:
        """Install each copy, then wait for all of them side by side (one after another
        could outlast the step's deadline); None once install.failed is published for the
        first that failed."""
        installed = []
        for copy, desired in wanted:
            backend = self._backends[copy.backend.type]
            if not await self._install_canary(event, copy, backend, desired):
                return None
            installed.append((backend, copy, desired))
        waits = [asyncio.ensure_future(self._ready_or_failure(event, *c)) for c in installed]
        try:
            outcomes = await asyncio.gather(*waits)
        except BaseException:
            for wait in waits:
                wait.cancel()
            raise
        for (_, _, desired), outcome in zip(installed, outcomes, strict=True):
            if isinstance(outcome, InstallFailed):
                await self._publish_install_failed(event, desired, outcome)
                return None
        return [
            (*copy, outcome)
            for copy, outcome in zip(installed, outcomes, strict=True)
            if isinstance(outcome, ObservedRelease)
        ]

    async def _may_install(self, event: Envelope) -> bool:
        """Whether the saga is still the run's; a superseded one is ended here."""
        state = await observe_saga(self._bus, event)
        if state is SagaState.SUPERSEDED:
            superseded = RunFailed(
                reason=Reason.SUPERSEDED, message=SUPERSEDED, phase=Phase.INSTALLING
            )
            await self._end(event, EventType.RUN_FAILED, superseded)
        return state is SagaState.CURRENT

    async def _choose_backend(self, event: Envelope, data: SpecPulled) -> ReleaseBackend | None:
        """The backend of the PlntBackend's type; None (the saga failed) when none is."""
        backend = self._backends.get(data.backend.type)
        if backend is None:
            message = (
                f"PlntBackend {data.backend_name!r} is of type {data.backend.type!r}, "
                "which this installer does not drive "
                f"(available: {', '.join(sorted(self._backends))})"
            )
            unavailable = RunFailed(
                reason=Reason.BACKEND_UNAVAILABLE, message=message, phase=Phase.INSTALLING
            )
            await self._end(event, EventType.RUN_FAILED, unavailable)
        return backend

    async def place(
        self, event: Envelope, data: SpecPulled, delivery: Delivery
    ) -> tuple[tuple[SpecPulled, ...], tuple[PlacementEntry, ...]] | None:
        """The first acceptable backends with room for the canary, ``spec.placement.spread``
        of them at most, their GPUs booked: ``data`` naming each, and the placement (each
        Installing, each backend passed over Skipped with its reason). If none has room the
        run is Pending (capacity.awaited) and this event comes back in
        ``capacity_retry_s``: nothing installed, a stable keeps serving."""
        passed_over = list(data.passed_over)
        refusals: list[tuple[str, Refusal]] = []
        driven = [c for c in data.choices() if c.backend.type in self._backends]
        if not driven:  # the saga fails naming the type (_choose_backend)
            return (data,), ()
        placement = data.run.spec.placement
        # a replacement installs only the copies missing beside the ones that keep serving
        spread = (placement.spread if placement is not None else 1) - len(data.kept())
        chosen: list[tuple[SpecPulled, PlacementEntry]] = []
        for choice in driven:
            narrowed = data.model_copy(
                update={"backend_name": choice.backend_name, "backend": choice.backend}
            )
            desired = logic.desired_canary(narrowed, saga_id=event.sagaid, spread=bool(chosen))
            refusal = (
                None
                if self._placements is None
                else await self._placements.reserve(
                    backend_name=choice.backend_name, spec=choice.backend, canary=desired
                )
            )
            if refusal is None:
                entry = PlacementEntry(
                    backend=choice.backend_name, state="Installing", replicas=desired.replicas
                )
                chosen.append((narrowed, entry))
                if len(chosen) == spread:
                    break
                continue
            refusals.append((choice.backend_name, refusal))
            reason = Reason.BACKEND_UNAVAILABLE if refusal.unreachable else Reason.NO_CAPACITY
            passed_over.append(
                PlacementEntry(
                    backend=choice.backend_name,
                    state="Skipped",
                    reason=f"{reason.value}: {refusal.message}",
                )
            )
        if chosen:
            return tuple(c for c, _ in chosen), (*(e for _, e in chosen), *passed_over)
        if all(refusal.unreachable for _, refusal in refusals):
            # no backend answered: install on the first unbooked, as with one backend, and
            # let its install report the failure rather than wait on capacity unknown
            first = driven[0]
            narrowed = data.model_copy(
                update={"backend_name": first.backend_name, "backend": first.backend}
            )
            replicas = logic.desired_canary(narrowed, saga_id=event.sagaid).replicas
            installing = PlacementEntry(
                backend=first.backend_name, state="Installing", replicas=replicas
            )
            others = tuple(e for e in passed_over if e.backend != first.backend_name)
            return (narrowed,), (installing, *others)
        await self._await_capacity(event, data, refusals, tuple(passed_over))
        delivery.defer(self._capacity_retry_s)
        return None

    async def _await_capacity(
        self,
        event: Envelope,
        data: SpecPulled,
        refusals: list[tuple[str, Refusal]],
        placement: tuple[PlacementEntry, ...],
    ) -> None:
        message = "; ".join(
            f"PlntBackend {name!r}: {refusal.message}" for name, refusal in refusals
        )
        if self._awaited.get(event.sagaid) == message:
            return
        first_name, first = refusals[0]
        awaited = CapacityAwaited(
            backend=first_name,
            gpu_class=data.run.spec.backend.gpu_class or "",
            needed=first.needed,
            largest_free=max(refusal.largest_free for _, refusal in refusals),
            message=message,
            placement=placement,
        )
        await self._bus.publish(
            follow_up(event, EventType.CAPACITY_AWAITED, awaited, source=SERVICE),
            step=content_step(message),  # a new reason is news, not a duplicate
        )
        self._awaited[event.sagaid] = message
        log.info("canary.pending", reason=Reason.NO_CAPACITY.value, message=message)

    async def _unreserve(self, data: SpecPulled, desired: DesiredRelease) -> None:
        if self._placements is not None:
            await self._placements.release(backend_name=data.backend_name, canary=desired)

    async def _install_canary(
        self, event: Envelope, data: SpecPulled, backend: ReleaseBackend, desired: DesiredRelease
    ) -> bool:
        """Ask the backend for the canary; False once install.failed is published."""
        try:
            await backend.install(desired, pulled=data)
        except InstallFailed as exc:
            # an install the backend refuses outright (e.g. Helm cannot render the chart)
            # fails the step now rather than after every redelivery
            await self._publish_install_failed(event, desired, exc)
            return False
        SIDE_EFFECTS.labels(SERVICE, "canary_install").inc()
        log.info("canary.installing", release=desired.release, revision=desired.revision)
        return True

    async def _ready_or_failure(
        self, event: Envelope, backend: ReleaseBackend, data: SpecPulled, desired: DesiredRelease
    ) -> ObservedRelease | InstallFailed:
        """The canary once it serves, or why it never did (nothing published)."""
        timeout_s, source = logic.ready_timeout(
            data.backend, backend_name=data.backend_name, cap_s=self._ready_timeout_s
        )
        started = time.monotonic()
        try:
            return await backend.wait_ready(
                namespace=desired.namespace,
                release=desired.release,
                saga_id=event.sagaid,
                timeout_s=timeout_s,
                pulled=data,
            )
        except InstallFailed as exc:
            if time.monotonic() - started >= timeout_s:
                return InstallFailed(f"{exc}; the timeout is {source}", reason=exc.reason)
            return exc

    async def _publish_install_failed(
        self, event: Envelope, desired: DesiredRelease, exc: InstallFailed
    ) -> None:
        failed = InstallFailedEvent(
            reason=logic.install_failure_reason(exc.reason),
            message=str(exc),
            revision=desired.revision,
            release=desired.release,
            backend=desired.backend_name,
        )
        await self._bus.publish(follow_up(event, EventType.INSTALL_FAILED, failed, source=SERVICE))

    async def _still_wanted(
        self,
        event: Envelope,
        installed: list[tuple[ReleaseBackend, SpecPulled, DesiredRelease]],
    ) -> bool:
        """Whether the saga is still current now its canary serves; if not it is removed
        from every backend (superseded, or failed while we installed) and a superseded
        saga ended.

        A saga promoted meanwhile keeps it: this was a redelivered install (its first
        delivery's ack was lost) of the release that serves, or served until a newer
        saga (whose promotion retires it). While it is the run's latest saga it is made
        stable again: another replica's run.ready may have done so before this install.
        """
        state = await observe_saga(self._bus, event)
        if state is SagaState.CURRENT:
            return True
        if state is SagaState.ENDED and await self._promoted(event.sagaid):
            latest, _ = await latest_saga(self._bus, event.namespace, event.name)
            if latest in ("", event.sagaid):  # "": none recorded, as ``classify`` reads it
                for backend, _, desired in installed:
                    await backend.install(desired.model_copy(update={"role": ReleaseRole.STABLE}))
            log.info("canary.kept", reason="the saga was promoted meanwhile")
            return False
        for backend, data, desired in installed:
            await backend.uninstall(
                namespace=desired.namespace,
                release=desired.release,
                timeout_s=self._uninstall_timeout_s,
                pulled=data,
            )
        if state is SagaState.SUPERSEDED:
            rolled_back = RunRolledBack(
                revision=installed[0][2].revision, reason=Reason.SUPERSEDED, message=SUPERSEDED
            )
            await self._end(event, EventType.RUN_ROLLED_BACK, rolled_back)
        return False

    async def _publish_installed(
        self,
        event: Envelope,
        data: SpecPulled,
        serving: list[Serving],
        placement: tuple[PlacementEntry, ...],
        walk: tuple[str, ...],
    ) -> None:
        (_, first, desired, observed), further = serving[0], serving[1:]
        canary = CanaryRef(
            revision=desired.revision,
            release=desired.release,
            url=observed.url,
            spec_digest=data.spec_digest,
            backend=first.backend_name,
            spread=tuple(
                SpreadRelease(backend=copy.backend_name, release=release.release, url=seen.url)
                for _, copy, release, seen in further
            ),
            walk=walk,
        )
        await faults.pause_point(SERVICE, event.event_type.value, "after_effect")
        installed = CanaryInstalled(
            run=data.run, canary=canary, backend=first.backend_name, placement=placement
        )
        await self._bus.publish(
            follow_up(event, EventType.CANARY_INSTALLED, installed, source=SERVICE)
        )
        log.info("canary.installed", release=desired.release, url=observed.url)

    async def _compensate(
        self, event: Envelope, delivery: Delivery, reason: Reason, message: str
    ) -> None:
        """Remove this saga's canary, then end the saga: rolled back, or failed with no stable.

        Once a canary.installed is out (a walk's later copy failed, or a deadline passed
        as the first was installed) the canary may take live calls: the promoter takes it
        out of the route first, and its route.restored brings the removal here.

        While a PlntBackend's API is silent the canary is removed where it is seen and the
        saga stays RollingBack: a copy of it, or the stable, may be there. The event comes
        back until that API answers (or its PlntBackend is deleted)."""
        if await observe_saga(self._bus, event) is SagaState.ENDED:
            return
        if event.event_type is not EventType.ROUTE_RESTORED and await last_of_saga(
            self._bus, EventType.CANARY_INSTALLED, event
        ):
            log.info("canary.removal_after_restore", reason="the canary may be in the route")
            return
        held, silent = await self._held_reachable(event.namespace, event.name)
        releases = [release for _, release in held]
        mine: list[tuple[ReleaseBackend, DesiredRelease | None]] = [
            (backend, r) for backend, r in held if r.saga_id == event.sagaid
        ]
        unlisted = release_name(event.namespace, event.name, event.generation)
        if not mine and not silent:
            # not listed anywhere: removal is idempotent, so every backend makes sure
            mine = [(backend, None) for backend in self._backends.values()]
        removed: list[str] = []
        for backend, canary in mine:
            release = canary.release if canary else unlisted
            was_present = await backend.uninstall(
                namespace=event.namespace, release=release, timeout_s=self._uninstall_timeout_s
            )
            log.info("canary.removed", release=release, was_present=was_present)
            SIDE_EFFECTS.labels(SERVICE, "canary_removal").inc(int(was_present))
            removed += [release] if was_present else []
        if silent:
            await wait_to_end(self._bus, event, delivery, silent, removed, deleting=False)
            return
        await faults.pause_point(SERVICE, event.event_type.value, "after_effect")
        stable = logic.stable_revision(releases, excluding_saga=event.sagaid)
        revision = next((r.revision for _, r in mine if r is not None), "")
        await self._end_failed(event, reason, message, stable=stable, revision=revision)

    async def _end_failed(
        self, event: Envelope, reason: Reason, message: str, *, stable: str, revision: str = ""
    ) -> None:
        if logic.failure_terminal(stable) is EventType.RUN_ROLLED_BACK:
            rolled_back = RunRolledBack(
                revision=revision, stable_revision=stable, reason=reason, message=message
            )
            await self._end(event, EventType.RUN_ROLLED_BACK, rolled_back)
        else:
            failed = RunFailed(reason=reason, message=message, phase=Phase.ROLLING_BACK)
            await self._end(event, EventType.RUN_FAILED, failed)

    async def _promoted(self, sagaid: str) -> bool:
        claim = await self._bus.terminal_claim(sagaid)
        return claim is not None and claim.event_type == EventType.RUN_READY.value

    async def _end(self, event: Envelope, kind: EventType, data: RunFailed | RunRolledBack) -> None:
        await self._bus.publish_terminal(follow_up(event, kind, data, source=SERVICE))
        log.info("saga.ended", outcome=kind.value, reason=data.reason.value)

    async def _retire_old(self, event: Envelope, delivery: Delivery) -> None:
        """Promote the saga's release to stable, retire the older ones.

        With ``spec.rollback.keepPreviousFor`` the previous stable stays at 0 % (role
        previous) until the window ends: the event is deferred to its next check
        (``keep``), every delivery redoing this idempotently, and the one at the deadline
        retires the kept release.
        """
        latest, _ = await latest_saga(self._bus, event.namespace, event.name)
        if logic.reverted_since(event.sagaid, latest):
            # a late or replayed run.ready of a reverted saga: the revision it promoted was
            # retired and the one it would retire serves again
            log.info("saga.ready_after_revert", latest=latest)
            return
        held, silent = await self._held_reachable(event.namespace, event.name)
        await self._promote(event, delivery, held, silent)
        if silent:
            # what the silent PlntBackends hold is promoted or retired once they answer
            # again (a lost cluster's copy is retired when it returns, never before)
            come_back_for(silent, delivery, "release.retirement_deferred")

    async def _promote(
        self,
        event: Envelope,
        delivery: Delivery,
        held: list[tuple[ReleaseBackend, DesiredRelease]],
        silent: tuple[str, ...],
    ) -> None:
        """``_retire_old`` on the releases ``held`` where the PlntBackends answered."""
        data: RunReady = event.payload()
        if not any(release.saga_id == event.sagaid for _, release in held):
            # a deferred check after a revert or a newer promotion retired this saga's
            # release: what it kept is theirs now, not to be demoted again (or it is on
            # a silent PlntBackend: looked for again when that answers)
            log.info("saga.promoted_release_gone", unheard=list(silent))
            return
        for backend, release in held:
            if release.saga_id == event.sagaid and release.role is not ReleaseRole.STABLE:
                await backend.install(release.model_copy(update={"role": ReleaseRole.STABLE}))
        pulled = await self._pulled(event)
        keep_s = pulled.run.spec.rollback.keep_previous_s if pulled else 0.0
        retired, kept = logic.after_promotion(
            [release for _, release in held],
            promoted_saga=event.sagaid,
            previous_revision=data.previous_revision,
            keep=keep.remaining_s(event.time, keep_s) > 0,
            replaced=pulled.lost() if pulled else (),
        )
        await self._retire(held, retired)
        if kept is None:
            return
        holder = next(backend for backend, release in held if release is kept)
        if kept.role is not ReleaseRole.PREVIOUS:
            await holder.install(kept.model_copy(update={"role": ReleaseRole.PREVIOUS}))
            log.info("release.kept", release=kept.release, revision=kept.revision, for_s=keep_s)

        async def still_kept() -> bool:
            # a revert records its attempt before it moves the route, so the kept release
            # is never retired between the route's move and this service's run.reverted
            (latest, _), now = await asyncio.gather(
                latest_saga(self._bus, event.namespace, event.name),
                holder.releases(namespace=event.namespace, run_name=event.name),
            )
            if logic.reverted_since(event.sagaid, latest):
                return False
            return any(r.release == kept.release and r.role is ReleaseRole.PREVIOUS for r in now)

        if not await still_kept():
            log.info("release.no_longer_kept", release=kept.release, revision=kept.revision)
            return
        remaining = keep.remaining_s(event.time, keep_s)
        if remaining > 0:
            delivery.defer(keep.next_check_s(remaining))
            return
        await self._retire([(holder, kept)], [kept])

    async def _pulled(self, event: Envelope) -> SpecPulled | None:
        """The saga's spec.pulled; None once a newer saga's spec was pulled."""
        pulled = await last_of_saga(self._bus, EventType.SPEC_PULLED, event)
        return None if pulled is None else pulled.payload()

    async def _retire(
        self, held: list[tuple[ReleaseBackend, DesiredRelease]], retired: list[DesiredRelease]
    ) -> None:
        for backend, old in held:
            if old not in retired:
                continue
            await backend.uninstall(
                namespace=old.namespace, release=old.release, timeout_s=self._uninstall_timeout_s
            )
            SIDE_EFFECTS.labels(SERVICE, "release_retirement").inc()
            log.info("release.retired", release=old.release, revision=old.revision)

    async def _retire_reverted(self, event: Envelope, delivery: Delivery) -> None:
        """The reverted revision's release goes; the kept one serves again as the stable.
        The route left the reverted revision before this event: where a PlntBackend's API
        is silent, the event comes back for its releases once it answers."""
        data: RunReverted = event.payload()
        latest, _ = await latest_saga(self._bus, event.namespace, event.name)
        if latest and latest != event.sagaid:
            # a newer saga (a generation, a deletion) owns the run's releases now
            log.info("saga.revert_superseded", latest=latest)
            return
        held, silent = await self._held_reachable(event.namespace, event.name)
        for backend, release in held:
            if release.revision == data.revision and release.role is not ReleaseRole.STABLE:
                await backend.install(release.model_copy(update={"role": ReleaseRole.STABLE}))
        await self._retire(held, [r for _, r in held if r.revision == data.reverted_revision])
        if silent:
            come_back_for(silent, delivery, "release.retirement_deferred")

    async def _remove_all(self, event: Envelope, delivery: Delivery) -> None:
        """Remove every release of the run; run.removed once every PlntBackend confirmed.
        A silent one's releases are unknown: the event comes back until it answers (or
        is deleted), and only then is the run reported removed."""
        held, silent = await self._held_reachable(event.namespace, event.name)
        for backend, release in held:
            await backend.uninstall(
                namespace=release.namespace,
                release=release.release,
                timeout_s=self._uninstall_timeout_s,
            )
        names = [release.release for _, release in held]
        if silent:
            await wait_to_end(self._bus, event, delivery, silent, names, deleting=True)
            return
        names += [n for n in await removed_while_waiting(self._bus, event) if n not in names]
        # a retry after a removal timed out: what that attempt asked to remove is no longer
        # held, but the run is removed only once every backend confirmed it
        namespace = event.namespace
        for backend in self._backends.values():
            for name in await backend.still_removing(namespace=namespace, run_name=event.name):
                await backend.uninstall(
                    namespace=namespace, release=name, timeout_s=self._uninstall_timeout_s
                )
                names.append(name)
        removed = RunRemoved(releases_removed=tuple(names))
        await self._bus.publish_terminal(
            follow_up(event, EventType.RUN_REMOVED, removed, source=SERVICE)
        )
        log.info("run.removed", releases=len(names))
