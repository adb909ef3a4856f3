"""Smoke handler: run the harness while observing the saga, publish the verdict."""

import asyncio

from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.bus.saga import observe_saga
from plnt_common.events import (
    CanaryInstalled,
    Envelope,
    EventType,
    SmokeFigures,
    SmokeVerdict,
    follow_up,
)
from plnt_common.logs import get_logger
from plnt_common.saga import SagaState
from plnt_common.status import Reason
from plnt_common.tasks import discard, discarded_on_error
from plnt_smoke import logic
from plnt_smoke.adapters.harness import SmokeHarness

log = get_logger(__name__)
SERVICE = "smoke"


class SmokeHandlers:
    def __init__(self, *, bus: Bus, harness: SmokeHarness, concurrency: int) -> None:
        self._bus = bus
        self._harness = harness
        self._concurrency = concurrency

    async def handle(self, event: Envelope, delivery: Delivery) -> None:
        data: CanaryInstalled = event.payload()
        budget = data.run.spec.smoke_test
        log.info("smoke.started", url=data.canary.url, invocations=budget.invocations)
        # The saga check runs alongside the invocations rather than before them: waiting
        # would add a round trip to every deploy, while a saga that ended meanwhile (rare)
        # cancels the invocations as soon as the check answers.
        invoking = asyncio.ensure_future(
            self._harness.invoke_many(
                url=data.canary.url,
                payload=budget.payload or {},
                invocations=budget.invocations,
                concurrency=self._concurrency,
            )
        )
        async with discarded_on_error(invoking):
            state = await observe_saga(self._bus, event)
        if state is SagaState.ENDED:
            await discard(invoking)
            return
        if state is SagaState.SUPERSEDED:
            await discard(invoking)
            figures = SmokeFigures(passed=False, reason=Reason.SUPERSEDED.value)
            await self._publish(event, data, figures)
            return
        figures = logic.judge(await invoking, budget)
        log.info(
            "smoke.judged",
            passed=figures.passed,
            p50_ms=figures.p50_ms,
            p95_ms=figures.p95_ms,
            error_percent=figures.error_percent,
        )
        await self._publish(event, data, figures)

    async def on_exhausted(self, event: Envelope, exc: BaseException) -> None:
        data: CanaryInstalled = event.payload()
        await self._publish(
            event, data, SmokeFigures(passed=False, reason=f"smoke could not run: {exc}")
        )

    async def _publish(self, event: Envelope, data: CanaryInstalled, figures: SmokeFigures) -> None:
        kind = EventType.SMOKE_PASSED if figures.passed else EventType.SMOKE_FAILED
        verdict = SmokeVerdict(canary=data.canary, figures=figures)
        await self._bus.publish(follow_up(event, kind, verdict, source=SERVICE))
