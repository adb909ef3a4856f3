"""What a judgement records in ``status.analysis``: the figures of each revision, rounded
as shown; the window; the reason while a step or the guard holds; and the expected calls
that every early decision rests on."""

import math

import pytest

from plnt_common.figures import RevisionTotals
from plnt_common.resources import Analysis, Guard, RevisionFigures
from plnt_promoter import analysis, guard
from plnt_promoter.analysis import Outcome

INF = math.inf


def test_a_revisions_figures_are_its_rates_and_means_rounded_as_the_status_shows_them() -> None:
    # 7 calls: 1 within 100 ms, 6 between 100 and 500 ms
    totals = RevisionTotals(
        invocations=7,
        errors=1,
        latency_buckets=((0.1, 1), (0.5, 7), (INF, 7)),
        tokens=100,
        cost_usd=0.001,
    )
    assert analysis.revision_figures(totals) == RevisionFigures(
        invocations=7,
        error_percent=14.286,
        p95_ms=476.667,
        tokens_per_invocation=14.286,
        cost_per_invocation_usd=0.000143,
    )


def test_a_revision_without_calls_has_zero_figures() -> None:
    assert analysis.revision_figures(RevisionTotals()) == RevisionFigures()
    errors_only = RevisionTotals(invocations=2, errors=2)  # no latency counted
    assert analysis.revision_figures(errors_only).p95_ms == 0.0


@pytest.mark.parametrize(
    ("seen", "elapsed_s", "floor", "expected"),
    [
        (10, 5.0, 20, 60.0),  # the observed rate times the interval
        (1, 1.0, 50, 50.0),  # never fewer than the floor
        (30, 60.0, 20, 30.0),  # never fewer than the calls seen (a step past its interval)
        (3, 0.0, 0, 3.0),  # no time held yet: nothing to project
        (0, 0.0, 0, 0.0),
    ],
    ids=["projected", "floor", "seen", "no-time-held", "nothing"],
)
def test_the_expected_calls(seen: int, elapsed_s: float, floor: int, expected: float) -> None:
    got = analysis.expected_calls(seen=seen, elapsed_s=elapsed_s, interval_s=30.0, floor=floor)
    assert got == expected


def test_calls_slower_than_a_limit_past_every_bound_are_none() -> None:
    assert analysis.calls_slower_than(1.0, ((0.1, 5), (0.5, 8))) == 0


def judge(canary: RevisionTotals, elapsed_s: float) -> analysis.Judgement:
    return analysis.judge_step(
        analysis=Analysis(minInvocations=20),
        canary=canary,
        stable=RevisionTotals(),
        elapsed_s=elapsed_s,
        interval_s=30.0,
        step="2/3",
    )


def test_a_held_step_records_its_window_and_why_it_holds() -> None:
    canary = RevisionTotals(invocations=19, latency_buckets=((0.1, 19), (INF, 19)))
    judging = judge(canary, elapsed_s=12.34567)
    assert judging.figures.model_dump() == {
        "step": "2/3",
        "passed": False,
        "reason": "judging",
        "window_s": 12.346,
        "canary": analysis.revision_figures(canary).model_dump(),
        "stable": RevisionFigures().model_dump(),
    }
    waiting = judge(canary, elapsed_s=45.0)
    assert (waiting.outcome, waiting.figures.reason) == (Outcome.HOLD, "waiting for traffic")


def test_the_guard_records_its_window_and_why_it_holds_or_passes() -> None:
    limits = Guard(window="10s")
    totals = RevisionTotals(invocations=40, latency_buckets=((0.1, 40), (INF, 40)))
    held = guard.judge_window(limits, totals, elapsed_s=4.56789, interval_s=10.0)
    assert held.outcome is Outcome.HOLD
    assert (held.figures.step, held.figures.passed, held.figures.reason) == (
        "guard",
        False,
        "judging",
    )
    assert held.figures.window_s == 4.568
    passed = guard.judge_window(limits, totals, elapsed_s=10.0, interval_s=10.0)
    assert (passed.figures.step, passed.figures.passed, passed.figures.window_s) == (
        "guard",
        True,
        10.0,
    )
    assert passed.figures.reason == "40 calls, error 0%, p95 95 ms"
    assert passed.figures.canary == analysis.revision_figures(totals)


def test_max_p95_ms_is_read_in_milliseconds_against_the_buckets_bounds_in_seconds() -> None:
    # every call between 499.9 and 500 ms: none certainly slower than maxP95Ms 500
    just_within = RevisionTotals(
        invocations=40, latency_buckets=((0.4999, 0), (0.5, 40), (INF, 40))
    )
    budgets = Analysis(minInvocations=20, maxP95Ms=500)
    assert analysis.certainly_broken(budgets, just_within, expected=40.0) == ""
