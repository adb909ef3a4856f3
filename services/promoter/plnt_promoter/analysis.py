"""Judging one canary step on its live calls: pure functions over the step's window.

A window is what one revision served between the step's first reading of the figures and
the latest one (``plnt_common.figures.window``). Every tick the promoter asks
``judge_step`` whether the step holds on, passes or fails:

- Fail early, the moment a budget is certainly broken. "Certainly" is measured against
  the calls the step is expected to see: the canary's observed rate times the step
  interval, and never fewer than the calls already seen or ``minInvocations``. When the
  errors seen already exceed ``maxErrorPercent`` of that count, the step would end over
  budget even if every remaining call succeeded; the same for calls certainly slower than
  ``maxP95Ms`` (above 5 % of the count) and for tokens and cost (above the mean budget
  times the count). The ratio to the stable is judged only at the step's end.
- At the end of the interval the expected calls are the calls seen (a step is judged on
  no fewer than ``minInvocations``), so the same comparisons judge the whole window's
  error rate, mean tokens and mean cost: each of those budgets is decided in one place,
  ``certainly_broken``. The end alone judges the p95 interpolated from the buckets and
  its ratio to the stable's (``broken_budgets``). With fewer canary calls than
  ``minInvocations``, wait up to one more interval for them, then fail with "not enough
  traffic": a step never passes on no data.

Imports no I/O library.
"""

import math
from dataclasses import dataclass
from enum import StrEnum

from plnt_common.figures import RevisionTotals, latency_quantile_s
from plnt_common.resources import Analysis, AnalysisStatus, RevisionFigures

P95 = 0.95
TRAFFIC_WAIT_INTERVALS = 1.0
"""How many more step intervals a step short of ``minInvocations`` waits for traffic."""


class Outcome(StrEnum):
    HOLD = "hold"
    """Keep the weight and judge again at the next tick."""
    PASS = "pass"
    """Every budget held over the whole window."""
    FAIL = "fail"
    """A budget is broken, or the step saw too little traffic in its bounded wait."""


@dataclass(frozen=True)
class Judgement:
    outcome: Outcome
    figures: AnalysisStatus


def hold_s(interval_s: float) -> float:
    """Longest a step is held: its interval plus the bounded wait for traffic."""
    return interval_s * (1 + TRAFFIC_WAIT_INTERVALS)


def expected_calls(*, seen: int, elapsed_s: float, interval_s: float, floor: int) -> float:
    """The canary calls the step is expected to see, from the rate observed so far."""
    projected = seen * interval_s / elapsed_s if elapsed_s > 0 else 0.0
    return max(float(seen), projected, float(floor))


def revision_figures(totals: RevisionTotals) -> RevisionFigures:
    calls = totals.invocations
    p95_s = latency_quantile_s(P95, totals.latency_buckets)
    return RevisionFigures(
        invocations=calls,
        error_percent=round(100 * totals.errors / calls, 3) if calls else 0.0,
        p95_ms=round(1000 * p95_s, 3) if p95_s is not None else 0.0,
        tokens_per_invocation=round(totals.tokens / calls, 3) if calls else 0.0,
        cost_per_invocation_usd=round(totals.cost_usd / calls, 6) if calls else 0.0,
    )


def judge_step(
    *,
    analysis: Analysis,
    canary: RevisionTotals,
    stable: RevisionTotals,
    elapsed_s: float,
    interval_s: float,
    step: str,
) -> Judgement:
    """Whether step ``step`` (like ``2/3``) holds, passes or fails after ``elapsed_s``."""
    canary_figures, stable_figures = revision_figures(canary), revision_figures(stable)

    def verdict(outcome: Outcome, reason: str) -> Judgement:
        return Judgement(
            outcome,
            AnalysisStatus(
                step=step,
                passed=outcome is Outcome.PASS,
                reason=reason,
                window_s=round(elapsed_s, 3),
                canary=canary_figures,
                stable=stable_figures,
            ),
        )

    expected = expected_calls(
        seen=canary.invocations,
        elapsed_s=elapsed_s,
        interval_s=interval_s,
        floor=analysis.min_invocations,
    )
    broken = certainly_broken(analysis, canary, expected)
    if broken:
        return verdict(Outcome.FAIL, broken)
    if elapsed_s < interval_s:
        return verdict(Outcome.HOLD, "judging")
    if canary.invocations < analysis.min_invocations:
        if elapsed_s < hold_s(interval_s):
            return verdict(Outcome.HOLD, "waiting for traffic")
        return verdict(
            Outcome.FAIL,
            f"not enough traffic: {canary.invocations} canary calls in {elapsed_s:.1f}s, "
            f"minInvocations {analysis.min_invocations}",
        )
    failures = broken_budgets(analysis, canary_figures, stable_figures)
    if failures:
        return verdict(Outcome.FAIL, "; ".join(failures))
    return verdict(Outcome.PASS, passed_reason(canary_figures, stable_figures))


def certainly_broken(
    analysis: Analysis,
    canary: RevisionTotals,
    expected: float,
    *,
    subject: str = "canary",
    span: str = "this step",
) -> str:
    """The budget the step can no longer meet at the observed rate, or "" while it can.

    ``subject`` and ``span`` name the judged revision and window in the reason (the guard
    judges the promoted revision over its window).
    """
    allowed_errors = analysis.max_error_percent / 100 * expected
    if canary.errors > allowed_errors:
        return (
            f"{subject} errors {canary.errors} of {canary.invocations} calls exceed "
            f"maxErrorPercent {analysis.max_error_percent:g} of the {expected:.0f} calls "
            f"expected in {span}"
        )
    slow = calls_slower_than(analysis.max_p95_ms / 1000, canary.latency_buckets)
    if slow > (1 - P95) * expected:
        return (
            f"{subject} p95 over maxP95Ms {analysis.max_p95_ms:g}: {slow} of "
            f"{canary.invocations} calls slower, more than 5% of the {expected:.0f} expected"
        )
    tokens = analysis.max_tokens_per_invocation
    if tokens is not None and canary.tokens > tokens * expected:
        return (
            f"{subject} tokens {canary.tokens} already exceed maxTokensPerInvocation "
            f"{tokens:g} over the {expected:.0f} calls expected"
        )
    cost = analysis.max_cost_per_invocation_usd
    if cost is not None and canary.cost_usd > cost * expected:
        return (
            f"{subject} cost ${canary.cost_usd:.4f} already exceeds maxCostPerInvocationUsd "
            f"{cost:g} over the {expected:.0f} calls expected"
        )
    return ""


def calls_slower_than(limit_s: float, buckets: tuple[tuple[float, int], ...]) -> int:
    """Calls certainly slower than ``limit_s``: those above the first bound at or past it."""
    ordered = sorted(buckets)
    if not ordered:
        return 0
    total = ordered[-1][1]
    within = next((count for bound, count in ordered if bound >= limit_s), total)
    return max(0, total - within)


def broken_budgets(
    analysis: Analysis,
    canary: RevisionFigures,
    stable: RevisionFigures,
    *,
    subject: str = "canary",
) -> list[str]:
    """The budgets only a whole window judges, each naming its figure: p95 interpolated
    from the buckets, and its ratio to the stable's when the stable saw enough calls.

    Error rate, tokens and cost are ``certainly_broken``'s alone: at a window's end the
    expected calls are the calls seen, and its comparisons are the whole window's.
    """
    failures = []
    if canary.p95_ms > analysis.max_p95_ms:
        failures.append(f"{subject} p95 {canary.p95_ms:g} ms > maxP95Ms {analysis.max_p95_ms:g}")
    ratio_limit = analysis.max_p95_ratio_to_stable
    if (
        ratio_limit is not None
        and stable.invocations >= analysis.min_invocations
        and stable.p95_ms > 0
    ):
        ratio = canary.p95_ms / stable.p95_ms
        if ratio > ratio_limit and not math.isclose(ratio, ratio_limit):
            failures.append(
                f"{subject} p95 {canary.p95_ms:g} ms is {ratio:.2f}x the stable's "
                f"{stable.p95_ms:g} ms > maxP95RatioToStable {ratio_limit:g}"
            )
    return failures


def passed_reason(canary: RevisionFigures, stable: RevisionFigures) -> str:
    return (
        f"{canary.invocations} canary calls, error {canary.error_percent:g}%, "
        f"p95 {canary.p95_ms:g} ms (stable: {stable.invocations} calls, "
        f"error {stable.error_percent:g}%, p95 {stable.p95_ms:g} ms)"
    )
