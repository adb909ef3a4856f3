"""Smoke handler: run the harness while observing the saga, publish the verdict."""

import asyncio

from plnt_common import faults
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
from plnt_common.golden import GoldenCase, GoldenResult
from plnt_common.logs import get_logger
from plnt_common.metrics import SIDE_EFFECTS
from plnt_common.resources import SmokeTest
from plnt_common.saga import SagaState
from plnt_common.status import Reason
from plnt_common.tasks import discard, discarded_on_error
from plnt_smoke import contract, golden, logic
from plnt_smoke.adapters.harness import SmokeHarness
from plnt_smoke.ports import SimilarityScorer, SimilarityUnavailable

log = get_logger(__name__)
SERVICE = "smoke"


class SmokeHandlers:
    def __init__(
        self, *, bus: Bus, harness: SmokeHarness, scorer: SimilarityScorer, concurrency: int
    ) -> None:
        self._bus = bus
        self._harness = harness
        self._scorer = scorer
        self._concurrency = concurrency

    async def handle(self, event: Envelope, delivery: Delivery) -> None:
        data: CanaryInstalled = event.payload()
        budget = data.run.spec.smoke_test
        log.info(
            "smoke.started",
            url=data.canary.url,
            invocations=budget.invocations,
            golden_cases=len(budget.golden),
        )
        # The saga check runs alongside the invocations rather than before them: waiting
        # would add a round trip to every deploy, while a saga that ended meanwhile (rare)
        # cancels the invocations as soon as the check answers.
        invoking = asyncio.ensure_future(self._smoke(data, budget))
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
        figures = await invoking
        SIDE_EFFECTS.labels(SERVICE, "smoke_run").inc()
        await faults.pause_point(SERVICE, event.event_type.value, "after_effect")
        log.info(
            "smoke.judged",
            passed=figures.passed,
            golden_failed=[result.name for result in figures.golden if not result.passed],
            p50_ms=figures.p50_ms,
            p95_ms=figures.p95_ms,
            error_percent=figures.error_percent,
        )
        await self._publish(event, data, figures)

    async def _smoke(self, data: CanaryInstalled, budget: SmokeTest) -> SmokeFigures:
        """The runner contract's clauses 2-6 first: a canary that misses one fails without
        a budget invocation. Then the latency invocations and the golden cases, sent side
        by side within one concurrency limit."""
        canary, payload = data.canary, budget.payload or {}
        # placed on several backends (spec.placement.spread), each copy must keep the
        # contract; the budget and the golden cases run on the first. A walk's later copy
        # is tested alone, the others having passed before it.
        copies = logic.tested_copies(data)
        url = copies[0][1]
        for backend, copy_url in copies:
            clauses = await self._harness.contract(
                url=copy_url, payload=payload, revision=canary.revision
            )
            misses = contract.describe_misses(clauses)
            if misses and canary.spread:
                misses = f"on PlntBackend {backend}: {misses}"
            if misses:
                log.info("smoke.contract_missed", reason=misses)
                return logic.contract_missed(misses)
        slots = asyncio.Semaphore(self._concurrency)
        samples, golden_results = await asyncio.gather(
            self._harness.invoke_many(
                url=url, payload=budget.payload or {}, invocations=budget.invocations, slots=slots
            ),
            self._golden(url, budget.golden, slots),
        )
        return logic.judge(samples, budget, golden_results)

    async def _golden(
        self, url: str, cases: tuple[GoldenCase, ...], slots: asyncio.Semaphore
    ) -> tuple[GoldenResult, ...]:
        if not cases:
            return ()
        payloads = [case.input for case in cases]
        answers = await self._harness.answers(url=url, payloads=payloads, slots=slots)
        scores = await self._similarities(cases, answers)
        return tuple(
            golden.judge_case(case, answer, score)
            for case, answer, score in zip(cases, answers, scores, strict=True)
        )

    async def _similarities(
        self, cases: tuple[GoldenCase, ...], answers: list[golden.GoldenAnswer]
    ) -> list[golden.Similarity]:
        """A score for each case with ``similarTo`` and a reply; the others get none."""
        wanted = [
            (index, answer.text, case.expect.similar_to)
            for index, (case, answer) in enumerate(zip(cases, answers, strict=True))
            if case.expect.similar_to is not None and answer.text is not None
        ]
        scores = [golden.Similarity(score=None)] * len(cases)
        if not wanted:
            return scores
        try:
            values = await self._scorer.similarities(
                texts=[text for _, text, _ in wanted],
                references=[reference for _, _, reference in wanted],
            )
        except SimilarityUnavailable as exc:
            log.warning("smoke.similarity_unavailable", error=str(exc))
            return [golden.Similarity(score=None, problem=str(exc))] * len(cases)
        for (index, _, _), value in zip(wanted, values, strict=True):
            scores[index] = golden.Similarity(score=value)
        return scores

    async def on_exhausted(self, event: Envelope, exc: BaseException) -> None:
        data: CanaryInstalled = event.payload()
        await self._publish(
            event, data, SmokeFigures(passed=False, reason=f"smoke could not run: {exc}")
        )

    async def _publish(self, event: Envelope, data: CanaryInstalled, figures: SmokeFigures) -> None:
        kind = EventType.SMOKE_PASSED if figures.passed else EventType.SMOKE_FAILED
        tested = data.backend if data.canary.walk else ""
        verdict = SmokeVerdict(canary=data.canary, figures=figures, backend=tested)
        # a walk tests each backend's copy in turn: one verdict per copy
        step = data.backend if data.continues_walk() else ""
        await self._bus.publish(follow_up(event, kind, verdict, source=SERVICE), step=step)
