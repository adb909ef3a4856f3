"""The post-promotion guard: the promoted revision's live calls judged for ``guard.window``.

The promoter holds the saga's ``run.ready`` (the consumer keeps it in progress) until the
event's time plus the window, so a delivery after a crash resumes the same window; the
figures are read every tick like a held canary step's (``step_hold``), from the same
source. The moment a budget is certainly broken (the step analysis's early stop, against
the calls the window is expected to see) the run is reverted to the kept previous
revision (``revert``), reason GuardFailed; at the window's end its error rate and p95
are judged on the calls it saw. No calls in the window: the guard passes nothing and
fails nothing. A newer saga, a revert, or any later event of the run waiting
behind the held one (a `plnt rollback`) ends the guard.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime

from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.bus.saga import latest_saga
from plnt_common.bus.saga_events import last_of_saga
from plnt_common.errors import PlntError
from plnt_common.events import CanaryInstalled, Envelope, EventType, RunReady
from plnt_common.figures import FiguresSource, RevisionTotals, window_by_revision
from plnt_common.logs import get_logger
from plnt_common.resources import Analysis, AnalysisStatus, Guard, RevisionFigures
from plnt_common.status import Reason
from plnt_promoter import analysis, revert
from plnt_promoter.adapters.route_table import RouteTable
from plnt_promoter.step_hold import TICK_S

log = get_logger(__name__)
NO_TRAFFIC = "guard saw no traffic"
SUBJECT = "promoted revision"
SPAN = "the guard window"


def budgets(guard: Guard) -> Analysis:
    """The guard's budgets in the step analysis's terms (its floor of expected calls)."""
    limit = guard.max_p95_ms if guard.max_p95_ms is not None else Analysis().max_p95_ms
    return Analysis(max_error_percent=guard.max_error_percent, max_p95_ms=limit)


def judge_window(
    guard: Guard, totals: RevisionTotals, *, elapsed_s: float, interval_s: float
) -> analysis.Judgement:
    """HOLD while the window runs and no budget is certainly broken; FAIL or PASS.

    While the window runs, "certainly" is against the calls it is expected to see, never
    fewer than the step analysis's floor; at its end, against the calls it saw, however
    few: the same comparisons then judge the whole window's error rate, and the p95 is
    interpolated from the buckets.
    """
    limits = budgets(guard)
    figures = analysis.revision_figures(totals)
    ended = elapsed_s >= interval_s
    expected = (
        float(totals.invocations)
        if ended
        else analysis.expected_calls(
            seen=totals.invocations,
            elapsed_s=elapsed_s,
            interval_s=interval_s,
            floor=limits.min_invocations,
        )
    )
    broken = analysis.certainly_broken(limits, totals, expected, subject=SUBJECT, span=SPAN)
    if not broken and ended and totals.invocations:
        broken = "; ".join(
            analysis.broken_budgets(limits, figures, RevisionFigures(), subject=SUBJECT)
        )
    if broken:
        outcome = analysis.Outcome.FAIL
    elif not ended:
        outcome, broken = analysis.Outcome.HOLD, "judging"
    else:
        outcome = analysis.Outcome.PASS
        broken = (
            f"{figures.invocations} calls, error {figures.error_percent:g}%,"
            f" p95 {figures.p95_ms:g} ms"
            if totals.invocations
            else ""
        )
    return analysis.Judgement(
        outcome,
        AnalysisStatus(
            step="guard",
            passed=outcome is analysis.Outcome.PASS,
            reason=broken or NO_TRAFFIC,
            window_s=round(elapsed_s, 3),
            canary=figures,
        ),
    )


async def hold_guard(
    *,
    figures: FiguresSource,
    namespace: str,
    name: str,
    guard: Guard,
    revision: str,
    remaining_s: float,
    still_current: Callable[[], Awaitable[bool]],
    tick_s: float = TICK_S,
    clock: Callable[[], float] = time.monotonic,
) -> analysis.Judgement | None:
    """The guard's verdict over the rest of its window; None once it is no longer current."""
    started = clock()
    baseline: Mapping[str, RevisionTotals] | None = None
    while await still_current():
        try:
            reading = await figures.totals(namespace=namespace, name=name)
        except PlntError as exc:  # the source is away: try again at the next tick
            reading = None
            log.warning("guard.figures_unavailable", error=str(exc))
        now = clock()
        if reading is not None and baseline is None:
            baseline = reading
        if reading is not None and baseline is not None:
            totals = window_by_revision(reading, baseline).get(revision, RevisionTotals())
            judgement = judge_window(guard, totals, elapsed_s=now - started, interval_s=remaining_s)
            if judgement.outcome is not analysis.Outcome.HOLD:
                return judgement
        elif now - started >= remaining_s:
            return judge_window(guard, RevisionTotals(), elapsed_s=remaining_s, interval_s=0)
        await asyncio.sleep(min(tick_s, max(0.0, remaining_s - (clock() - started))))
    return None


async def guard_promotion(
    bus: Bus,
    routes: RouteTable,
    figures: FiguresSource,
    event: Envelope,
    delivery: Delivery,
    *,
    tick_s: float = TICK_S,
) -> None:
    """Hold ``run.ready`` for the run's ``spec.guard`` window; revert on a broken budget."""
    installed = await last_of_saga(bus, EventType.CANARY_INSTALLED, event)
    data: CanaryInstalled | None = installed.payload() if installed else None
    guard = data.run.spec.guard if data else None
    if guard is None:
        return
    ready: RunReady = event.payload()
    elapsed = (datetime.now(UTC) - event.time).total_seconds()
    remaining_s = guard.window_s - elapsed
    if remaining_s <= 0:
        log.info("guard.window_passed", revision=ready.revision)
        return

    async def still_current() -> bool:
        latest, _ = await latest_saga(bus, event.namespace, event.name)
        return latest == event.sagaid and not delivery.has_successor()

    log.info("guard.watching", revision=ready.revision, window_s=round(remaining_s, 3))
    judgement = await hold_guard(
        figures=figures,
        namespace=event.namespace,
        name=event.name,
        guard=guard,
        revision=ready.revision,
        remaining_s=remaining_s,
        still_current=still_current,
        tick_s=tick_s,
    )
    if judgement is None:
        log.info("guard.ended", reason="a newer saga, a revert or a later event of the run")
        return
    reason = judgement.figures.reason
    if judgement.outcome is analysis.Outcome.PASS:
        log.info(reason if reason == NO_TRAFFIC else "guard.passed", revision=ready.revision)
        return
    message = f"guard failed after {judgement.figures.window_s:g}s: {reason}"
    log.info("guard.failed", revision=ready.revision, reason=reason)
    await revert.revert(bus, routes, event, reason=Reason.GUARD_FAILED, message=message)
