"""The post-promotion guard: the promoted revision's live calls judged for ``guard.window``.

The window is a deadline, not a held delivery: the saga's ``run.ready`` is deferred
(``Delivery.defer``) from check to check (``step_hold.CHECK_S`` apart, the last one on the
deadline), the deadline being the event's time plus the window, and each check reads the
figures once, from the same source as a canary step's. The window's start and its figures
baseline are stored (``held_window``), so a check after a restart resumes the same window
and judges every call since its start. The moment a budget is certainly broken (the step
analysis's early stop, against the calls the window is expected to see) the run is
reverted to the kept previous revision (``revert``), reason GuardFailed; at the window's
end its error rate and p95 are judged on the calls it saw. No calls in the window: the
guard passes nothing and fails nothing. A newer saga or a revert (a `plnt rollback`,
handled by its own delivery meanwhile) ends the guard at its next check.
"""

import asyncio
import time
from collections.abc import Mapping

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
from plnt_promoter import analysis, held_window, revert
from plnt_promoter.adapters.route_table import RouteTable
from plnt_promoter.held_window import HeldWindow, baseline_of
from plnt_promoter.step_hold import CHECK_S, Check, next_check_s

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


def check_guard(
    *,
    window: HeldWindow | None,
    reading: Mapping[str, RevisionTotals] | None,
    now: float,
    deadline: float,
    guard: Guard,
    revision: str,
    check_s: float = CHECK_S,
) -> Check:
    """One check of the guard window ending at ``deadline`` (epoch seconds) on ``reading``
    (None: the figures were unavailable). PASS or FAIL, or HOLD as a deferral."""
    held = window or HeldWindow(started=now)
    if reading is not None and held.baseline is None:
        held = held.model_copy(update={"baseline": baseline_of(reading, (revision,))})
    interval_s, elapsed = deadline - held.started, now - held.started
    if reading is not None and held.baseline is not None:
        totals = window_by_revision(reading, held.baseline).get(revision, RevisionTotals())
        judgement = judge_window(guard, totals, elapsed_s=elapsed, interval_s=interval_s)
        if judgement.outcome is not analysis.Outcome.HOLD:
            return Check(held, judgement)
    elif elapsed >= interval_s:
        quiet = judge_window(guard, RevisionTotals(), elapsed_s=interval_s, interval_s=0)
        return Check(held, quiet)
    return Check(held, defer_s=next_check_s(elapsed, (interval_s,), check_s))


async def guard_promotion(
    bus: Bus,
    routes: RouteTable,
    figures: FiguresSource,
    event: Envelope,
    delivery: Delivery,
    *,
    check_s: float = CHECK_S,
) -> None:
    """One check of the run's ``spec.guard`` window on ``run.ready``: revert on a broken
    budget, or defer the event to the next check."""
    installed = await last_of_saga(bus, EventType.CANARY_INSTALLED, event)
    data: CanaryInstalled | None = installed.payload() if installed else None
    guard = data.run.spec.guard if data else None
    if guard is None:
        return
    ready: RunReady = event.payload()
    (latest, _), (stored, revision) = await asyncio.gather(
        latest_saga(bus, event.namespace, event.name),
        held_window.load(bus, event.sagaid, held_window.GUARD),
    )
    if latest != event.sagaid:
        log.info("guard.ended", reason="a newer saga or a revert")
        if stored is not None:
            await held_window.forget(bus, event.sagaid, held_window.GUARD)
        return
    deadline = event.time.timestamp() + guard.window_s
    now = time.time()
    if stored is None and now >= deadline:
        log.info("guard.window_passed", revision=ready.revision)
        return
    try:
        reading: Mapping[str, RevisionTotals] | None = await figures.totals(
            namespace=event.namespace, name=event.name
        )
    except PlntError as exc:  # the source is away: try again at the next check
        reading = None
        log.warning("guard.figures_unavailable", error=str(exc))
    if stored is None:
        log.info("guard.watching", revision=ready.revision, window_s=round(deadline - now, 3))
    check = check_guard(
        window=stored,
        reading=reading,
        now=now,
        deadline=deadline,
        guard=guard,
        revision=ready.revision,
        check_s=check_s,
    )
    if check.verdict is None:
        if check.window != stored:
            await held_window.store(bus, event.sagaid, held_window.GUARD, check.window, revision)
        delivery.defer(check.defer_s)
        return
    judgement = check.verdict
    reason = judgement.figures.reason
    if judgement.outcome is analysis.Outcome.PASS:
        log.info(reason if reason == NO_TRAFFIC else "guard.passed", revision=ready.revision)
    else:
        message = f"guard failed after {judgement.figures.window_s:g}s: {reason}"
        log.info("guard.failed", revision=ready.revision, reason=reason)
        await revert.revert(bus, routes, event, reason=Reason.GUARD_FAILED, message=message)
    if stored is not None:
        await held_window.forget(bus, event.sagaid, held_window.GUARD)
