"""Promoter handlers: decode, observe the saga and the route, decide, write, publish.

The stepped canary runs here too: each delivery of ``canary.stepped`` is one check of the
step (``step_hold``), answered with ``analysis.passed`` or ``analysis.failed`` or deferred
to the next check. Operator requests and the manual gate are ``control``'s.
"""

import asyncio
import time
from collections.abc import Mapping

from plnt_common import canary_walk, faults
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.bus.saga import observe_saga
from plnt_common.embeddings import SentenceEmbedder, SimilarityScorer
from plnt_common.errors import Conflict, PlntError
from plnt_common.events import (
    AnalysisVerdict,
    CanaryInstalled,
    CanaryRef,
    CanaryStepped,
    Envelope,
    EventType,
    InstallFailed,
    RouteRestored,
    RunReady,
    SmokeVerdict,
    StepTimedOut,
    follow_up,
)
from plnt_common.figures import FiguresSource, RevisionTotals
from plnt_common.logs import get_logger
from plnt_common.messages import SUPERSEDED, deadline_passed
from plnt_common.resources import Canary
from plnt_common.routes import RouteEntry, RouteTarget
from plnt_common.saga import SagaState
from plnt_common.status import Phase, Reason
from plnt_promoter import analysis, guard, held_window, logic, revert, shadow_phase
from plnt_promoter.adapters.route_table import RouteTable
from plnt_promoter.adapters.saga_events import last_of_saga
from plnt_promoter.control import OperatorControl, gated
from plnt_promoter.step_hold import CHECK_S, check_step

log = get_logger(__name__)
SERVICE = "promoter"
COMPENSATED_TIMEOUTS = {
    Phase.SMOKING.value,
    Phase.SHADOWING.value,
    Phase.PROGRESSING.value,
    Phase.PROMOTING.value,
}
STEP_EVENTS = (EventType.CANARY_STEPPED, EventType.ANALYSIS_PASSED, EventType.ANALYSIS_FAILED)


class PromoterHandlers:
    def __init__(
        self,
        *,
        bus: Bus,
        routes: RouteTable,
        public_url: str,
        figures: FiguresSource,
        check_s: float = CHECK_S,
        scorer: SimilarityScorer | None = None,
        shadow_check_s: float = shadow_phase.CHECK_S,
    ) -> None:
        self._bus = bus
        self._routes = routes
        self._public_url = public_url
        self._figures = figures
        self._check_s = check_s
        self._control = OperatorControl(
            bus=bus, routes=routes, promote=self._promote, restore=self._restore
        )
        self._shadow = shadow_phase.ShadowPhase(
            bus=bus,
            routes=routes,
            scorer=scorer or SentenceEmbedder(),
            control=self._control,
            restore=self._restore,
            check_s=shadow_check_s,
        )

    async def handle(self, event: Envelope, delivery: Delivery) -> None:
        match event.event_type:
            case EventType.CANARY_INSTALLED:
                await self._route_canary(event)
            case EventType.INSTALL_FAILED:
                await self._on_install_failed(event)
            case EventType.SMOKE_PASSED | EventType.SHADOW_PASSED:
                await self._on_pass(event)
            case EventType.SHADOW_STARTED:
                await self._shadow.judge(event, delivery)
            case EventType.SHADOW_FAILED:
                await self._shadow.fail(event)
            case EventType.CANARY_STEPPED:
                await self._hold_step(event, delivery)
            case EventType.ANALYSIS_PASSED:
                await self._on_step_passed(event)
            case EventType.ANALYSIS_FAILED:
                failed: AnalysisVerdict = event.payload()
                step = failed.label()
                await self._restore(
                    event,
                    failed.canary.revision,
                    failed.canary.release,
                    Reason.ANALYSIS_FAILED,
                    f"step {step} analysis failed: {failed.figures.reason}",
                )
            case EventType.SMOKE_FAILED:
                verdict: SmokeVerdict = event.payload()
                reason = verdict.figures.failure or (
                    Reason.SUPERSEDED
                    if verdict.figures.reason == Reason.SUPERSEDED
                    else Reason.SMOKE_FAILED
                )
                await self._restore(
                    event,
                    verdict.canary.revision,
                    verdict.canary.release,
                    reason,
                    logic.smoke_failure_message(verdict),
                )
            case EventType.STEP_TIMED_OUT:
                timed_out: StepTimedOut = event.payload()
                if timed_out.phase in COMPENSATED_TIMEOUTS or (
                    timed_out.phase == Phase.INSTALLING.value and await self._installed(event)
                ):
                    entry, _ = await self._routes.get(namespace=event.namespace, name=event.name)
                    revision = entry.canary.revision if entry and entry.canary else ""
                    message = deadline_passed(timed_out.phase, timed_out.deadline_s)
                    await self._restore(event, revision, "", Reason.STEP_TIMED_OUT, message)
            case EventType.PROMOTE_REQUESTED:
                await self._control.on_promote(event)
            case EventType.ABORT_REQUESTED:
                await self._control.on_abort(event)
            case EventType.RUN_READY:
                await guard.guard_promotion(
                    self._bus, self._routes, self._figures, event, delivery, check_s=self._check_s
                )
            case EventType.ROLLBACK_REQUESTED:
                await revert.rollback(self._bus, self._routes, event)
            case EventType.RUN_DELETED:
                await self._control.supersede_waiting(event)
                await self._routes.remove(namespace=event.namespace, name=event.name)
                log.info("route.removed")

    async def on_exhausted(self, event: Envelope, exc: BaseException) -> None:
        """A step we could not complete: take the canary out so the installer ends the saga."""
        if event.event_type in (
            EventType.CANARY_INSTALLED,
            EventType.SMOKE_PASSED,
            EventType.SMOKE_FAILED,
            *STEP_EVENTS,
            *shadow_phase.SHADOW_EVENTS,
        ):
            message = f"promoter gave up: {exc}"
            await self._restore(event, "", "", Reason.DELIVERY_EXHAUSTED, message)

    def _endpoint(self, event: Envelope) -> str:
        return logic.endpoint_url(self._public_url, event.namespace, event.name)

    async def _installed(self, event: Envelope) -> Envelope | None:
        """The saga's latest canary.installed: from it on, the canary may be in the route."""
        return await last_of_saga(self._bus, EventType.CANARY_INSTALLED, event)

    async def _on_install_failed(self, event: Envelope) -> None:
        """A walk's later copy failed to install (or its install passed its deadline):
        the walked copy takes live calls, so the route is restored before the installer
        removes the copies (its route.restored). Before any canary.installed, the
        installer compensates alone."""
        if await self._installed(event) is None:
            return
        failed: InstallFailed = event.payload()
        message = f"installing the canary on PlntBackend {failed.backend!r}: {failed.message}"
        await self._restore(event, failed.revision, "", failed.reason, message)

    async def _route_canary(self, event: Envelope) -> None:
        data: CanaryInstalled = event.payload()
        if data.continues_walk():
            await self._route_next_copy(event, data)
            return
        # read at once: the route is read for the gate check and tried first by the update
        state, route = await asyncio.gather(
            observe_saga(self._bus, event),
            self._routes.get(namespace=event.namespace, name=event.name),
        )
        if state is not SagaState.CURRENT:
            log.info("canary.not_routed", reason="saga superseded or ended")
            return
        plan = data.run.spec.canary
        walk = logic.walk_of(data.canary, plan.steps, route[0])
        # a walk routes one copy at a time, from the first backend
        canary = (
            logic.copy_target(data.canary, event.sagaid, walk[0])
            if walk
            else logic.target(data.canary, event.sagaid)
        )
        # a superseded saga's restore rewrites the route: the update reads it again
        read = None if await self._control.supersede_waiting(event, route) else route

        # A shadowed canary takes no live call before its shadow phase passes, the smoke
        # test included: it answers only its own smoke calls and the mirrored ones. A
        # replacement takes none before its smoke test promotes it.
        weight = 0 if plan.shadowed or data.replacing() else plan.traffic_percent

        def add(entry: RouteEntry | None) -> RouteEntry | None:
            return logic.with_canary(
                entry,
                namespace=event.namespace,
                name=event.name,
                canary=canary,
                traffic_percent=weight,
                endpoint=self._endpoint(event),
            )

        entry = await self._routes.update(
            namespace=event.namespace, name=event.name, change=add, read=read
        )
        log.info(
            "canary.routed", revision=canary.revision, weight=entry.canary_weight if entry else 0
        )

    async def _route_next_copy(self, event: Envelope, data: CanaryInstalled) -> None:
        """A walk's next copy serves: it takes the canary's share from the previous one,
        at ``trafficPercent`` while its smoke test runs; its steps follow smoke.passed."""
        if await observe_saga(self._bus, event) is not SagaState.CURRENT:
            log.info("canary.not_routed", reason="saga superseded or ended")
            return
        canary, walk = data.canary, data.canary.walk
        weight = data.run.spec.canary.traffic_percent

        def change(current: RouteEntry | None) -> RouteEntry | None:
            return logic.walked_to(
                current,
                saga_id=event.sagaid,
                copy=logic.copy_target(canary, event.sagaid, data.backend),
                weight=weight,
                walk=logic.walk_releases(canary, event.sagaid, walk),
            )

        entry = await self._routes.update(namespace=event.namespace, name=event.name, change=change)
        log.info("canary.routed", backend=data.backend, weight=entry.canary_weight if entry else 0)

    async def _on_pass(self, event: Envelope) -> None:
        data: SmokeVerdict = event.payload()
        state, (entry, revision), installed = await asyncio.gather(
            observe_saga(self._bus, event),
            self._routes.get(namespace=event.namespace, name=event.name),
            last_of_saga(self._bus, EventType.CANARY_INSTALLED, event),
        )
        plan = installed.payload().run.spec.canary if installed else Canary()
        verdict = logic.decide_on_pass(state, entry, event.sagaid)
        log.info("smoke.passed.decision", verdict=verdict.value)
        lost = installed.payload().lost() if installed is not None else ()
        if event.event_type is EventType.SMOKE_PASSED and data.continues_walk():
            if verdict is logic.Verdict.PROMOTE:
                walk = data.canary.walk
                step = logic.segment_start(plan.steps, walk, data.backend)
                await self._step_to(event, data.canary, plan, step=step, walk=walk)
            return
        if lost:
            # the revision was judged when it was promoted: no shadow, steps or gate again
            await self._promote(event, data.canary, verdict, (entry, revision), replacing=lost)
            return
        if verdict is logic.Verdict.PROMOTE and await self._shadow.start(
            event, data.canary, plan, entry
        ):
            return
        if verdict is logic.Verdict.PROMOTE and logic.steps_apply(plan.steps, entry):
            walk = logic.walk_of(data.canary, plan.steps, entry)
            await self._step_to(event, data.canary, plan, step=1, walk=walk)
            return
        if verdict is logic.Verdict.PROMOTE and gated(plan) and not plan.steps:
            log.info("canary.paused", reason="manual gate")
            return
        await self._promote(event, data.canary, verdict, (entry, revision))

    async def _promote(
        self,
        event: Envelope,
        canary: CanaryRef,
        verdict: logic.Verdict,
        read: tuple[RouteEntry | None, int],
        *,
        replacing: tuple[str, ...] = (),
    ) -> None:
        """Act on ``verdict``: all traffic to the canary and ``run.ready``, or restore.
        A replacement (``replacing``: the backends whose copy was lost) keeps the stable's
        other copies serving and no previous revision: the one it replaces is the same."""
        if verdict is logic.Verdict.IGNORE:
            return
        if verdict is logic.Verdict.WAIT:
            raise Conflict("canary not in the route yet; retrying")
        if verdict is logic.Verdict.RESTORE:
            await self._supersede(event, canary)
            return
        entry = read[0]
        previous = entry.stable.revision if entry and entry.stable else ""
        if verdict is logic.Verdict.PROMOTE:
            endpoint = self._endpoint(event)

            def promote(current: RouteEntry | None) -> RouteEntry | None:
                if not logic.canary_is_routed(current, event.sagaid):
                    return None
                assert current is not None
                if replacing:
                    return logic.replaced(current, endpoint, canary, replacing)
                every_copy = logic.with_every_copy(current, canary, event.sagaid)
                return logic.promoted(every_copy, endpoint)

            after = await self._routes.update(
                namespace=event.namespace, name=event.name, change=promote, read=read
            )
            if not logic.promoted_by(after, event.sagaid):
                # a restore of this saga wrote the route first: it ends the saga, not us
                log.info("canary.not_promoted", reason="the canary was taken out first")
                return
        ready = RunReady(
            revision=canary.revision,
            endpoint=self._endpoint(event),
            spec_digest=canary.spec_digest,
            previous_revision=""
            if replacing or verdict is logic.Verdict.ALREADY_PROMOTED
            else previous,
        )
        await faults.pause_point(SERVICE, event.event_type.value, "after_effect")
        await self._bus.publish_terminal(
            follow_up(event, EventType.RUN_READY, ready, source=SERVICE)
        )
        log.info("run.promoted", revision=canary.revision)

    # --- stepped canary: canary.stepped -> analysis.passed / analysis.failed ------------

    async def _step_to(
        self,
        event: Envelope,
        canary: CanaryRef,
        plan: Canary,
        *,
        step: int,
        walk: tuple[str, ...] = (),
    ) -> None:
        """Route the canary at step ``step``'s weight (on the step's backend's copy, when
        walking ``walk``) and publish ``canary.stepped``."""
        weight = canary_walk.step_weight(plan.steps, step)
        backend = canary_walk.step_backend(plan.steps, walk, step)

        def change(current: RouteEntry | None) -> RouteEntry | None:
            if not walk:
                return logic.at_step_weight(current, saga_id=event.sagaid, weight=weight)
            return logic.walked_to(
                current,
                saga_id=event.sagaid,
                copy=logic.copy_target(canary, event.sagaid, backend),
                weight=weight,
                walk=logic.walk_releases(canary, event.sagaid, walk),
            )

        entry = await self._routes.update(namespace=event.namespace, name=event.name, change=change)
        if not logic.canary_is_routed(entry, event.sagaid):
            log.info("canary.not_stepped", reason="the canary is out of the route")
            return
        stepped = CanaryStepped(
            canary=canary,
            plan=plan,
            step=step,
            traffic_percent=weight,
            hold_s=analysis.hold_s(plan.step_interval_s),
            walk=walk,
            backend=backend,
        )
        await faults.pause_point(SERVICE, event.event_type.value, "after_effect")
        await self._bus.publish(
            follow_up(event, EventType.CANARY_STEPPED, stepped, source=SERVICE), step=str(step)
        )
        log.info("canary.stepped", step=stepped.label(), weight=weight)

    async def _hold_step(self, event: Envelope, delivery: Delivery) -> None:
        """One check of a held step: answer it, or defer it to the next check."""
        data: CanaryStepped = event.payload()
        label = data.label()
        wait = held_window.step_wait(data.step)
        (state, (entry, _)), (stored, revision) = await asyncio.gather(
            self._observe(event), held_window.load(self._bus, event.sagaid, wait)
        )

        async def end_wait() -> None:
            if stored is not None:
                await held_window.forget(self._bus, event.sagaid, wait)

        if state is not SagaState.CURRENT:
            await self._supersede(event, data.canary)
            await end_wait()
            return
        if not logic.canary_is_routed(entry, event.sagaid):
            log.info("step.not_held", reason="the canary is out of the route")
            await end_wait()
            return
        resumed = delivery.attempt > 1 or stored is not None
        if resumed and await self._step_judged(event, data.step):
            log.info("step.already_judged", step=label)
            await end_wait()
            return
        assert entry is not None
        reading, problem = await self._read_figures(event)
        check = check_step(
            window=stored,
            reading=reading,
            problem=problem,
            now=time.time(),
            plan=data.plan,
            step=label,
            canary_revision=data.canary.revision,
            stable_revision=entry.stable.revision if entry.stable else "",
            check_s=self._check_s,
        )
        if check.verdict is None:
            if check.window != stored:
                await held_window.store(self._bus, event.sagaid, wait, check.window, revision)
            delivery.defer(check.defer_s)
            return
        judgement = check.verdict
        passed = judgement.outcome is analysis.Outcome.PASS
        verdict = AnalysisVerdict(
            canary=data.canary,
            plan=data.plan,
            step=data.step,
            traffic_percent=data.traffic_percent,
            figures=judgement.figures,
            walk=data.walk,
            backend=data.backend,
        )
        kind = EventType.ANALYSIS_PASSED if passed else EventType.ANALYSIS_FAILED
        await faults.pause_point(SERVICE, event.event_type.value, "after_effect")
        await self._bus.publish(
            follow_up(event, kind, verdict, source=SERVICE), step=str(data.step)
        )
        log.info(kind.value, step=label, reason=judgement.figures.reason)
        await end_wait()

    async def _read_figures(
        self, event: Envelope
    ) -> tuple[Mapping[str, RevisionTotals] | None, str]:
        """The run's live figures, or None and why when the source is away (the next
        check reads them again)."""
        try:
            return await self._figures.totals(namespace=event.namespace, name=event.name), ""
        except PlntError as exc:
            log.warning("analysis.figures_unavailable", error=str(exc))
            return None, str(exc)

    async def _step_judged(self, event: Envelope, step: int) -> bool:
        """A verdict on ``step`` is in the stream already (a redelivered step)."""
        for kind in (EventType.ANALYSIS_PASSED, EventType.ANALYSIS_FAILED):
            verdict = await last_of_saga(self._bus, kind, event)
            if verdict is not None and verdict.payload().step >= step:
                return True
        return False

    async def _on_step_passed(self, event: Envelope) -> None:
        data: AnalysisVerdict = event.payload()
        state, (entry, revision) = await self._observe(event)
        if state is not SagaState.CURRENT:
            await self._supersede(event, data.canary)
            return
        if waiting := data.next_to_install():
            # the installer installs the next copy; its smoke.passed resumes the steps
            log.info("canary.walk_installing", backend=waiting)
            return
        if not data.last():
            await self._step_to(event, data.canary, data.plan, step=data.step + 1, walk=data.walk)
            return
        verdict = logic.decide_on_pass(state, entry, event.sagaid)
        if verdict is logic.Verdict.WAIT:
            log.info("canary.not_promoted", reason="the canary is out of the route")
            return
        if verdict is logic.Verdict.PROMOTE and gated(data.plan):
            log.info("canary.paused", reason="manual gate")
            return
        await self._promote(event, data.canary, verdict, (entry, revision))

    async def _observe(self, event: Envelope) -> tuple[SagaState, tuple[RouteEntry | None, int]]:
        """The saga's state and the run's route entry with its revision, read together."""
        state, read = await asyncio.gather(
            observe_saga(self._bus, event),
            self._routes.get(namespace=event.namespace, name=event.name),
        )
        return state, read

    async def _supersede(self, event: Envelope, canary: CanaryRef) -> None:
        """The saga is no longer current: take its canary out (nothing when it ended)."""
        await self._restore(
            event,
            canary.revision,
            canary.release,
            Reason.SUPERSEDED,
            SUPERSEDED,
        )

    async def _end_promoted(self, event: Envelope, stable: RouteTarget, endpoint: str) -> None:
        """A restore that found the saga's canary promoted already: the promotion won the
        route, so the saga ends Ready (the promoting delivery's claim, or this one's when
        that delivery is gone)."""
        log.info("route.not_restored", reason="the canary was promoted first")
        ready = RunReady(revision=stable.revision, endpoint=endpoint or self._endpoint(event))
        await self._bus.publish_terminal(
            follow_up(event, EventType.RUN_READY, ready, source=SERVICE)
        )

    async def _restore(
        self, event: Envelope, revision: str, release: str, reason: Reason, message: str
    ) -> None:
        state = await observe_saga(self._bus, event)
        if state is SagaState.ENDED:
            return

        def restore(current: RouteEntry | None) -> RouteEntry | None:
            if current is None and state is SagaState.SUPERSEDED:
                return None  # the run moved on (or is being deleted): create no route for it
            return logic.without_canary(
                current, namespace=event.namespace, name=event.name, saga_id=event.sagaid
            )

        entry = await self._routes.update(
            namespace=event.namespace, name=event.name, change=restore
        )
        # the route is where a promotion and a restore of one saga race, and the first
        # write wins: a canary promoted already stays, and the saga ends Ready
        if (
            entry is not None
            and entry.stable is not None
            and logic.promoted_by(entry, event.sagaid)
        ):
            await self._end_promoted(event, entry.stable, entry.endpoint)
            return
        restored = RouteRestored(
            revision=revision,
            release=release,
            stable_revision=entry.stable.revision if entry and entry.stable else "",
            reason=reason,
            message=message,
        )
        await faults.pause_point(SERVICE, event.event_type.value, "after_effect")
        await self._bus.publish(
            follow_up(event, EventType.ROUTE_RESTORED, restored, source=SERVICE)
        )
        log.info("route.restored", revision=revision, reason=reason.value)
