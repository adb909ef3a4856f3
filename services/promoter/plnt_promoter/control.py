"""Operator requests: the manual gate, ``promote.requested`` and ``abort.requested``.

A held step (``step_hold``) is deferred between its checks, so a request for that run is
delivered meanwhile and answers at once; the step's next check finds the canary out of
the route (or the saga ended) and ends the hold. A shadow phase's check reads the saga's
latest request from the stream (``ending_request``) and ends the phase with its answer.
"""

from collections.abc import Awaitable, Callable

from plnt_common.bus.bus import Bus
from plnt_common.bus.saga import observe_saga
from plnt_common.bus.saga_events import last_of_saga
from plnt_common.events import CanaryRef, Envelope, EventType, OperatorRequest
from plnt_common.logs import get_logger
from plnt_common.messages import SUPERSEDED
from plnt_common.projection import saga_order
from plnt_common.resources import Canary
from plnt_common.routes import RouteEntry
from plnt_common.saga import SagaState
from plnt_common.status import Reason
from plnt_promoter import logic
from plnt_promoter.adapters.route_table import RouteTable

log = get_logger(__name__)

Promote = Callable[
    [Envelope, CanaryRef, logic.Verdict, tuple[RouteEntry | None, int]], Awaitable[None]
]
Restore = Callable[[Envelope, str, str, Reason, str], Awaitable[None]]


def gated(plan: Canary) -> bool:
    """The manual gate holds the canary instead of promoting it."""
    return plan.manual_gate


def aborted_message(request: OperatorRequest) -> str:
    return f"aborted by the operator ({request.by or 'plnt.work/abort'})"


class OperatorControl:
    """Answers operator requests with the promoter's own promote and restore."""

    def __init__(self, *, bus: Bus, routes: RouteTable, promote: Promote, restore: Restore) -> None:
        self._bus = bus
        self._routes = routes
        self._promote = promote
        self._restore = restore

    async def ending_request(self, event: Envelope, canary: CanaryRef) -> Envelope | None:
        """The saga's request that ends a held step now: an abort, or a promote --full
        (not while a walk has copies to install: see ``_promote_now``)."""
        aborted = await last_of_saga(self._bus, EventType.ABORT_REQUESTED, event)
        if aborted is not None:
            return aborted
        promoted = await last_of_saga(self._bus, EventType.PROMOTE_REQUESTED, event)
        if promoted is not None and promoted.payload().full and not canary.waiting():
            return promoted
        return None

    async def end_held_step(self, event: Envelope, request: Envelope, canary: CanaryRef) -> None:
        """End the held step ``event`` as ``request`` asks."""
        log.info("step.ended_by_operator", request=request.event_type.value)
        if request.event_type is EventType.ABORT_REQUESTED:
            await self._abort(event, canary, request.payload())
            return
        await self._promote_now(event, canary)

    async def on_promote(self, event: Envelope) -> None:
        """Pass the gate (or, with ``full``, skip the remaining steps): promote now."""
        request: OperatorRequest = event.payload()
        if await observe_saga(self._bus, event) is not SagaState.CURRENT:
            log.info("promote.ignored", reason="the saga ended or was superseded")
            return
        installed = await last_of_saga(self._bus, EventType.CANARY_INSTALLED, event)
        if installed is None:
            log.info("promote.ignored", reason="no canary installed")
            return
        canary: CanaryRef = installed.payload().canary
        if not request.full and not await self._at_gate(event, installed):
            log.info("promote.ignored", reason="the run is not waiting at the manual gate")
            return
        await self._promote_now(event, canary)

    async def on_abort(self, event: Envelope) -> None:
        """Take this saga's canary out now; the installer then ends the saga RolledBack."""
        if await observe_saga(self._bus, event) is not SagaState.CURRENT:
            log.info("abort.ignored", reason="the saga ended or was superseded")
            return
        if await last_of_saga(self._bus, EventType.ROUTE_RESTORED, event) is not None:
            log.info("abort.ignored", reason="the canary is already out of the route")
            return
        installed = await last_of_saga(self._bus, EventType.CANARY_INSTALLED, event)
        canary = installed.payload().canary if installed else None
        request: OperatorRequest = event.payload()
        if canary is None:
            await self._restore(event, "", "", Reason.ABORTED, aborted_message(request))
            return
        await self._abort(event, canary, request)

    async def supersede_waiting(
        self, event: Envelope, read: tuple[RouteEntry | None, int] | None = None
    ) -> bool:
        """An older saga's canary still in the route when ``event`` (a newer saga's
        canary.installed or run.deleted) arrives is waiting at the gate (a step or a smoke
        test would end its saga itself): end it Superseded, so every saga ends once.

        ``read``: the route as the caller just read it. True when a waiting saga was
        ended: its restore rewrote the route."""
        entry, _ = read or await self._routes.get(namespace=event.namespace, name=event.name)
        waiting = entry.canary if entry is not None else None
        if waiting is None or saga_order(waiting.saga_id) >= saga_order(event.sagaid):
            return False
        older = event.model_copy(
            update={"sagaid": waiting.saga_id, "generation": saga_order(waiting.saga_id)[0]}
        )
        log.info("canary.superseded_at_gate", sagaid=waiting.saga_id)
        await self._restore(older, waiting.revision, waiting.release, Reason.SUPERSEDED, SUPERSEDED)
        return True

    async def _abort(self, event: Envelope, canary: CanaryRef, request: OperatorRequest) -> None:
        await self._restore(
            event, canary.revision, canary.release, Reason.ABORTED, aborted_message(request)
        )

    async def _promote_now(self, event: Envelope, canary: CanaryRef) -> None:
        if canary.waiting():
            # promoting now would serve the revision on fewer backends than placed and
            # retire the stable's copies on the others
            log.info(
                "promote.ignored",
                reason="the walk has copies still to install, smoke-test and step",
                waiting=list(canary.waiting()),
            )
            return
        state = await observe_saga(self._bus, event)
        read = await self._routes.get(namespace=event.namespace, name=event.name)
        verdict = logic.decide_on_pass(state, read[0], event.sagaid)
        if verdict is logic.Verdict.WAIT:
            log.info("canary.not_promoted", reason="the canary is out of the route")
            return
        await self._promote(event, canary, verdict, read)

    async def _at_gate(self, event: Envelope, installed: Envelope) -> bool:
        """Every step passed (or the smoke test, without steps) and the gate holds."""
        plan: Canary = installed.payload().run.spec.canary
        if not gated(plan):
            return False
        if not plan.steps:
            return await last_of_saga(self._bus, EventType.SMOKE_PASSED, event) is not None
        passed = await last_of_saga(self._bus, EventType.ANALYSIS_PASSED, event)
        return passed is not None and passed.payload().last()
