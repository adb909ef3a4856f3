"""Promoter handlers: decode, observe the saga and the route, decide, write, publish."""

import asyncio

from plnt_common import faults
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.bus.saga import observe_saga
from plnt_common.errors import Conflict
from plnt_common.events import (
    CanaryInstalled,
    Envelope,
    EventType,
    RouteRestored,
    RunReady,
    SmokeVerdict,
    StepTimedOut,
    follow_up,
)
from plnt_common.logs import get_logger
from plnt_common.routes import RouteEntry
from plnt_common.saga import SagaState
from plnt_common.status import Phase, Reason
from plnt_promoter import logic
from plnt_promoter.adapters.route_table import RouteTable

log = get_logger(__name__)
SERVICE = "promoter"
COMPENSATED_TIMEOUTS = {Phase.SMOKING.value, Phase.PROMOTING.value}


class PromoterHandlers:
    def __init__(self, *, bus: Bus, routes: RouteTable, public_url: str) -> None:
        self._bus = bus
        self._routes = routes
        self._public_url = public_url

    async def handle(self, event: Envelope, delivery: Delivery) -> None:
        match event.event_type:
            case EventType.CANARY_INSTALLED:
                await self._route_canary(event)
            case EventType.SMOKE_PASSED:
                await self._on_pass(event)
            case EventType.SMOKE_FAILED:
                verdict: SmokeVerdict = event.payload()
                reason = (
                    Reason.SUPERSEDED
                    if verdict.figures.reason == Reason.SUPERSEDED
                    else Reason.SMOKE_FAILED
                )
                await self._restore(
                    event,
                    verdict.canary.revision,
                    verdict.canary.release,
                    reason,
                    verdict.figures.reason,
                )
            case EventType.STEP_TIMED_OUT:
                timed_out: StepTimedOut = event.payload()
                if timed_out.phase in COMPENSATED_TIMEOUTS:
                    entry, _ = await self._routes.get(namespace=event.namespace, name=event.name)
                    revision = entry.canary.revision if entry and entry.canary else ""
                    message = f"{timed_out.phase} passed its {timed_out.deadline_s:g}s deadline"
                    await self._restore(event, revision, "", Reason.STEP_TIMED_OUT, message)
            case EventType.RUN_DELETED:
                await self._routes.remove(namespace=event.namespace, name=event.name)
                log.info("route.removed")

    async def on_exhausted(self, event: Envelope, exc: BaseException) -> None:
        """A step we could not complete: take the canary out so the installer ends the saga."""
        if event.event_type in (
            EventType.CANARY_INSTALLED,
            EventType.SMOKE_PASSED,
            EventType.SMOKE_FAILED,
        ):
            message = f"promoter gave up: {exc}"
            await self._restore(event, "", "", Reason.DELIVERY_EXHAUSTED, message)

    def _endpoint(self, event: Envelope) -> str:
        return logic.endpoint_url(self._public_url, event.namespace, event.name)

    async def _route_canary(self, event: Envelope) -> None:
        data: CanaryInstalled = event.payload()
        if await observe_saga(self._bus, event) is not SagaState.CURRENT:
            log.info("canary.not_routed", reason="saga superseded or ended")
            return
        canary = logic.target(data.canary, event.sagaid)

        def add(entry: RouteEntry | None) -> RouteEntry | None:
            return logic.with_canary(
                entry,
                namespace=event.namespace,
                name=event.name,
                canary=canary,
                traffic_percent=data.run.spec.canary.traffic_percent,
                endpoint=self._endpoint(event),
            )

        entry = await self._routes.update(namespace=event.namespace, name=event.name, change=add)
        log.info(
            "canary.routed", revision=canary.revision, weight=entry.canary_weight if entry else 0
        )

    async def _on_pass(self, event: Envelope) -> None:
        data: SmokeVerdict = event.payload()
        state, (entry, revision) = await asyncio.gather(
            observe_saga(self._bus, event),
            self._routes.get(namespace=event.namespace, name=event.name),
        )
        verdict = logic.decide_on_pass(state, entry, event.sagaid)
        log.info("smoke.passed.decision", verdict=verdict.value)
        if verdict is logic.Verdict.IGNORE:
            return
        if verdict is logic.Verdict.WAIT:
            raise Conflict("canary not in the route yet; retrying")
        if verdict is logic.Verdict.RESTORE:
            await self._restore(
                event,
                data.canary.revision,
                data.canary.release,
                Reason.SUPERSEDED,
                "a newer generation superseded this saga",
            )
            return
        previous = entry.stable.revision if entry and entry.stable else ""
        if verdict is logic.Verdict.PROMOTE:
            endpoint = self._endpoint(event)

            def promote(current: RouteEntry | None) -> RouteEntry | None:
                if (
                    current is None
                    or current.canary is None
                    or current.canary.saga_id != event.sagaid
                ):
                    return None
                return logic.promoted(current, endpoint)

            await self._routes.update(
                namespace=event.namespace,
                name=event.name,
                change=promote,
                read=(entry, revision),
            )
        ready = RunReady(
            revision=data.canary.revision,
            endpoint=self._endpoint(event),
            spec_digest=data.canary.spec_digest,
            previous_revision="" if verdict is logic.Verdict.ALREADY_PROMOTED else previous,
        )
        await faults.pause_point(SERVICE, event.event_type.value, "after_effect")
        await self._bus.publish_terminal(
            follow_up(event, EventType.RUN_READY, ready, source=SERVICE)
        )
        log.info("run.promoted", revision=data.canary.revision)

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
