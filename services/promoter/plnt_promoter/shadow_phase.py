"""The shadow phase: after the smoke test, live calls are mirrored to the canary (which
takes none of them) and its answers judged against the stable's before any weight moves.

- ``start`` (on ``smoke.passed`` of a run whose ``spec.canary.shadow.percent`` is above 0
  and which has a stable revision to compare with) writes the route's ``shadow``
  (``ShadowRoute``: this saga, the share, the noise share, the budget) with the canary at
  weight 0, and publishes ``shadow.started``.
- ``judge`` handles ``shadow.started``: each delivery is one check. It reads the saga's
  pairs from ``PLNT_SHADOW`` (``adapters.shadow_pairs``), scores the new ones, and either
  answers (``shadow.passed``, the route's shadow cleared first; or ``shadow.failed``) or
  publishes the figures so far (``shadow.checked``) and defers the event to its next
  check (``Delivery.defer``): no delivery is held for the phase, and a restarted
  promoter resumes the same phase (its clock is the ``shadow.started`` event's time).
- ``shadow.passed`` continues as ``smoke.passed`` did (the steps, or promotion);
  ``shadow.failed`` takes the canary out as a failed analysis does (``fail``).
- An abort or ``promote --full`` (``control``) ends the phase: its own delivery acts, and
  the next check finds the canary out of the route (or promoted) and does nothing.

The noise share is a quarter of ``percent``, at least 1 %: enough stable-vs-stable pairs
for a median without doubling the stable's load.
"""

import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC

from plnt_common import faults
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.bus.saga import observe_saga
from plnt_common.bus.saga_events import last_of_saga
from plnt_common.embeddings import SimilarityScorer, SimilarityUnavailable
from plnt_common.events import (
    CanaryRef,
    Envelope,
    EventType,
    ShadowJudged,
    ShadowStarted,
    follow_up,
)
from plnt_common.logs import get_logger
from plnt_common.messages import SUPERSEDED
from plnt_common.resources import Canary, ShadowStatus
from plnt_common.routes import RouteEntry
from plnt_common.saga import SagaState
from plnt_common.shadow_pairs import ShadowPair, ShadowRoute
from plnt_common.status import Reason
from plnt_promoter import logic, shadow_compare
from plnt_promoter.adapters.route_table import RouteTable
from plnt_promoter.adapters.shadow_pairs import read_pairs
from plnt_promoter.control import OperatorControl, Restore

log = get_logger(__name__)
SERVICE = "promoter"

CHECK_S = 5.0  # PLNT_PROMOTER_SHADOW_CHECK_S
"""Between two checks of a shadow phase: the pairs are re-read and the new ones scored."""
SHADOW_EVENTS = (EventType.SHADOW_STARTED, EventType.SHADOW_PASSED, EventType.SHADOW_FAILED)
SCORE_CACHE_SIZE = 50_000
"""Scores kept by pair id, so each check embeds only the pairs that are new."""

ReadPairs = Callable[..., Awaitable[list[ShadowPair]]]


def noise_percent(percent: int) -> int:
    """The share of live calls sent to the stable a second time (the noise floor)."""
    return max(1, round(percent / 4))


def shadowing(entry: RouteEntry | None, route: ShadowRoute) -> RouteEntry | None:
    """The route mirroring to this saga's canary, which takes no live call; None (no
    write) when the canary is not this saga's or the route says so already."""
    if not logic.canary_is_routed(entry, route.saga_id):
        return None
    assert entry is not None
    return entry.model_copy(update={"shadow": route, "canary_weight": 0})


def without_shadow(entry: RouteEntry | None, saga_id: str) -> RouteEntry | None:
    """The route with this saga's mirroring ended; None when it mirrors nothing of it."""
    if entry is None or entry.shadow is None or entry.shadow.saga_id != saga_id:
        return None
    return entry.model_copy(update={"shadow": None})


class ShadowPhase:
    def __init__(
        self,
        *,
        bus: Bus,
        routes: RouteTable,
        scorer: SimilarityScorer,
        control: OperatorControl,
        restore: Restore,
        check_s: float = CHECK_S,
        read: ReadPairs = read_pairs,
    ) -> None:
        self._bus = bus
        self._routes = routes
        self._scorer = scorer
        self._control = control
        self._restore = restore
        self._check_s = check_s
        self._read = read
        self._scores: dict[str, float] = {}

    async def start(
        self, event: Envelope, canary: CanaryRef, plan: Canary, entry: RouteEntry | None
    ) -> bool:
        """Start the shadow phase after ``event`` (a smoke.passed) when the run asks for one
        and has a stable revision to compare with; False when it does not apply (the caller
        goes on to the steps or promotion)."""
        if event.event_type is not EventType.SMOKE_PASSED or not plan.shadowed:
            return False
        if entry is None or entry.stable is None:
            log.info("shadow.skipped", reason="a first rollout has no stable to compare with")
            return False
        if await last_of_saga(self._bus, EventType.SHADOW_STARTED, event) is not None:
            return True  # a redelivered smoke.passed: the phase runs (or ran) already
        assert plan.shadow is not None
        shadow = plan.shadow
        route = ShadowRoute(
            saga_id=event.sagaid,
            percent=shadow.percent,
            noise_percent=noise_percent(shadow.percent),
            budget_usd=shadow.budget_usd,
        )
        written = await self._routes.update(
            namespace=event.namespace,
            name=event.name,
            change=lambda current: shadowing(current, route),
        )
        if not logic.canary_is_routed(written, event.sagaid):
            log.info("shadow.not_started", reason="the canary is out of the route")
            return True
        started = ShadowStarted(
            canary=canary,
            plan=shadow,
            noise_percent=route.noise_percent,
            figures=ShadowStatus(calls=shadow.calls),
        )
        await faults.pause_point(SERVICE, event.event_type.value, "after_effect")
        await self._bus.publish(follow_up(event, EventType.SHADOW_STARTED, started, source=SERVICE))
        log.info("shadow.started", percent=route.percent, noise_percent=route.noise_percent)
        return True

    async def judge(self, event: Envelope, delivery: Delivery) -> None:
        """One check of the phase ``event`` (shadow.started) started."""
        data: ShadowStarted = event.payload()
        if await observe_saga(self._bus, event) is not SagaState.CURRENT:
            canary = data.canary
            await self._restore(
                event, canary.revision, canary.release, Reason.SUPERSEDED, SUPERSEDED
            )
            return
        if await self._judged(event):
            log.info("shadow.already_judged")
            return
        entry, _ = await self._routes.get(namespace=event.namespace, name=event.name)
        if not logic.canary_is_routed(entry, event.sagaid):
            log.info("shadow.ended", reason="the canary is out of the route")
            return
        request = await self._control.ending_request(event, data.canary)
        if request is not None:
            await self._control.end_held_step(event, request, data.canary)
            return
        judgement = await self._check(event, data)
        if judgement.outcome is shadow_compare.Outcome.HOLD:
            await self._report_progress(event, data, judgement.figures)
            elapsed = _elapsed_s(event)
            delivery.defer(max(0.0, min(self._check_s, data.plan.max_duration_s - elapsed)))
            return
        passed = judgement.outcome is shadow_compare.Outcome.PASS
        if passed:
            await self._routes.update(
                namespace=event.namespace,
                name=event.name,
                change=lambda current: without_shadow(current, event.sagaid),
            )
        kind = EventType.SHADOW_PASSED if passed else EventType.SHADOW_FAILED
        verdict = ShadowJudged(canary=data.canary, plan=data.plan, figures=judgement.figures)
        await faults.pause_point(SERVICE, event.event_type.value, "after_effect")
        await self._bus.publish(follow_up(event, kind, verdict, source=SERVICE))
        log.info(kind.value, reason=judgement.figures.reason)

    async def fail(self, event: Envelope) -> None:
        """shadow.failed: the canary out of the route (and its mirroring with it)."""
        data: ShadowJudged = event.payload()
        await self._restore(
            event,
            data.canary.revision,
            data.canary.release,
            Reason.SHADOW_FAILED,
            f"shadow failed: {data.figures.reason}",
        )

    async def _check(self, event: Envelope, data: ShadowStarted) -> shadow_compare.Judgement:
        pairs = shadow_compare.of_saga(
            await self._read(
                self._bus, namespace=event.namespace, name=event.name, since=event.time
            ),
            event.sagaid,
        )
        try:
            scores = await self._scored(pairs)
        except SimilarityUnavailable as exc:
            found = shadow_compare.figures(pairs, {}, data.plan)
            reason = f"answers could not be scored: {exc}"
            figures = found.status.model_copy(update={"passed": False, "reason": reason})
            return shadow_compare.Judgement(shadow_compare.Outcome.FAIL, figures)
        found = shadow_compare.figures(pairs, scores, data.plan)
        return shadow_compare.judge(found, data.plan, elapsed_s=_elapsed_s(event))

    async def _scored(self, pairs: Sequence[ShadowPair]) -> dict[str, float]:
        new = [pair for pair in pairs if pair.pair_id not in self._scores]
        if new:
            if len(self._scores) + len(new) > SCORE_CACHE_SIZE:
                self._scores.clear()
            self._scores.update(await shadow_compare.score_pairs(new, self._scorer))
        return {p.pair_id: self._scores[p.pair_id] for p in pairs if p.pair_id in self._scores}

    async def _report_progress(
        self, event: Envelope, data: ShadowStarted, figures: ShadowStatus
    ) -> None:
        """shadow.checked, once per count of pairs (a check with none new is deduplicated)."""
        if not figures.pairs and not figures.noise_pairs:
            return
        checked = ShadowJudged(canary=data.canary, plan=data.plan, figures=figures)
        await self._bus.publish(
            follow_up(event, EventType.SHADOW_CHECKED, checked, source=SERVICE),
            step=f"{figures.pairs}.{figures.noise_pairs}",
        )

    async def _judged(self, event: Envelope) -> bool:
        for kind in (EventType.SHADOW_PASSED, EventType.SHADOW_FAILED):
            if await last_of_saga(self._bus, kind, event) is not None:
                return True
        return False


def _elapsed_s(event: Envelope, now: Callable[[], float] = time.time) -> float:
    """Seconds since the phase started (the shadow.started event's time)."""
    return max(0.0, now() - event.time.astimezone(UTC).timestamp())
