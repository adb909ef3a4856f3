"""Every budget at every judging point where it can decide, each case pinning one line.

A canary step judges while it is held (the early stop: a budget the step can no longer
meet at the observed rate) and at its end (the whole window); the guard judges the
promoted revision the same two ways over its window. Each case below fails when the line
that decides it is removed, and a figure exactly at its budget passes. The guard has no
ratio, token or cost budget: it judges error rate and p95 only.
"""

import math

import pytest

from plnt_common.figures import RevisionTotals
from plnt_common.resources import Analysis, Guard, RevisionFigures
from plnt_promoter import analysis, guard
from plnt_promoter.analysis import Outcome

INF = math.inf
STEP_S = 30.0
FAST_STABLE = RevisionTotals(invocations=400, latency_buckets=((0.1, 400), (INF, 400)))
"""400 calls within 100 ms: p95 95 ms."""


def calls(
    n: int, *, errors: int = 0, slow: int = 0, tokens: int = 0, cost: float = 0.0
) -> RevisionTotals:
    """``n`` calls, ``slow`` of them above 1 s, the rest within 100 ms."""
    buckets = ((0.1, n - slow), (0.5, n - slow), (1.0, n - slow), (INF, n))
    return RevisionTotals(
        invocations=n, errors=errors, latency_buckets=buckets, tokens=tokens, cost_usd=cost
    )


def middling(n: int) -> RevisionTotals:
    """``n`` calls, all between 100 and 500 ms: p95 480 ms, none certainly over 400 ms."""
    return RevisionTotals(invocations=n, latency_buckets=((0.1, 0), (0.5, n), (INF, n)))


def step(
    budgets: Analysis,
    canary: RevisionTotals,
    *,
    elapsed_s: float,
    stable: RevisionTotals = FAST_STABLE,
) -> analysis.Judgement:
    return analysis.judge_step(
        analysis=budgets,
        canary=canary,
        stable=stable,
        elapsed_s=elapsed_s,
        interval_s=STEP_S,
        step="1/3",
    )


def window(limits: Guard, totals: RevisionTotals, *, elapsed_s: float) -> analysis.Judgement:
    return guard.judge_window(limits, totals, elapsed_s=elapsed_s, interval_s=10.0)


# 40 calls in 3 s of a 30 s step: 400 expected
EARLY = [
    pytest.param(
        Analysis(minInvocations=20, maxErrorPercent=1),
        calls(40, errors=4),
        calls(40, errors=5),
        "canary errors 5 of 40 calls exceed maxErrorPercent 1 of the 400 calls expected in"
        " this step",
        id="error rate",
    ),
    pytest.param(
        Analysis(minInvocations=20, maxP95Ms=500),
        calls(40, slow=20),
        calls(40, slow=21),
        "canary p95 over maxP95Ms 500: 21 of 40 calls slower, more than 5% of the 400 expected",
        id="p95",
    ),
    pytest.param(
        Analysis(minInvocations=20, maxTokensPerInvocation=100),
        calls(40, tokens=40_000),
        calls(40, tokens=40_001),
        "canary tokens 40001 already exceed maxTokensPerInvocation 100 over the 400 calls expected",
        id="tokens",
    ),
    pytest.param(
        Analysis(minInvocations=20, maxCostPerInvocationUsd=0.01),
        calls(40, cost=4.0),
        calls(40, cost=4.01),
        "canary cost $4.0100 already exceeds maxCostPerInvocationUsd 0.01 over the 400 calls"
        " expected",
        id="cost",
    ),
]


@pytest.mark.parametrize(("budgets", "within", "over", "reason"), EARLY)
def test_a_step_stops_early_once_a_budget_is_past_what_the_whole_step_allows(
    budgets: Analysis, within: RevisionTotals, over: RevisionTotals, reason: str
) -> None:
    held = step(budgets, within, elapsed_s=3.0)
    assert (held.outcome, held.figures.reason) == (Outcome.HOLD, "judging")
    failed = step(budgets, over, elapsed_s=3.0)
    assert (failed.outcome, failed.figures.reason) == (Outcome.FAIL, reason)
    assert not failed.figures.passed


@pytest.mark.parametrize(
    ("budgets", "canary"),
    [
        (Analysis(minInvocations=20, maxP95Ms=400), middling(40)),
        (Analysis(minInvocations=20, maxP95Ms=5000, maxP95RatioToStable=2), calls(40, slow=4)),
    ],
    ids=["interpolated p95", "ratio to the stable"],
)
def test_the_interpolated_p95_and_the_ratio_never_stop_a_step_early(
    budgets: Analysis, canary: RevisionTotals
) -> None:
    assert step(budgets, canary, elapsed_s=STEP_S - 0.1).outcome is Outcome.HOLD
    assert step(budgets, canary, elapsed_s=STEP_S).outcome is Outcome.FAIL


# The same totals hold at 29 s (the rate projects 30 calls) and fail at the end, where the
# expected calls are the 29 seen.
AT_THE_END = [
    pytest.param(
        Analysis(minInvocations=20, maxErrorPercent=10),
        calls(29, errors=3),
        "canary errors 3 of 29 calls exceed maxErrorPercent 10 of the 29 calls expected in"
        " this step",
        id="error rate",
    ),
    pytest.param(
        Analysis(minInvocations=20, maxP95Ms=400),
        middling(29),
        "canary p95 480 ms > maxP95Ms 400",
        id="p95",
    ),
    pytest.param(
        Analysis(minInvocations=20, maxP95Ms=5000, maxP95RatioToStable=2),
        calls(29, slow=3),
        "canary p95 1000 ms is 10.53x the stable's 95 ms > maxP95RatioToStable 2",
        id="ratio to the stable",
    ),
    pytest.param(
        Analysis(minInvocations=20, maxTokensPerInvocation=100),
        calls(29, tokens=2950),
        "canary tokens 2950 already exceed maxTokensPerInvocation 100 over the 29 calls expected",
        id="tokens",
    ),
    pytest.param(
        Analysis(minInvocations=20, maxCostPerInvocationUsd=0.01),
        calls(29, cost=0.295),
        "canary cost $0.2950 already exceeds maxCostPerInvocationUsd 0.01 over the 29 calls"
        " expected",
        id="cost",
    ),
]


@pytest.mark.parametrize(("budgets", "canary", "reason"), AT_THE_END)
def test_a_step_that_ends_over_a_budget_fails_at_its_end_naming_the_figure(
    budgets: Analysis, canary: RevisionTotals, reason: str
) -> None:
    assert step(budgets, canary, elapsed_s=29.0).outcome is Outcome.HOLD
    failed = step(budgets, canary, elapsed_s=STEP_S)
    assert (failed.outcome, failed.figures.reason) == (Outcome.FAIL, reason)


@pytest.mark.parametrize(
    ("budgets", "canary", "stable"),
    [
        (Analysis(minInvocations=20, maxErrorPercent=10), calls(30, errors=3), FAST_STABLE),
        (Analysis(minInvocations=20, maxP95Ms=480), middling(40), FAST_STABLE),
        (
            Analysis(minInvocations=20, maxP95RatioToStable=2),
            middling(40),  # p95 480 ms, twice the stable's 240 ms
            RevisionTotals(invocations=400, latency_buckets=((0.05, 0), (0.25, 400))),
        ),
        (Analysis(minInvocations=20, maxTokensPerInvocation=100), calls(30, tokens=3000), None),
        (Analysis(minInvocations=20, maxCostPerInvocationUsd=0.01), calls(30, cost=0.3), None),
    ],
    ids=["error rate", "p95", "ratio to the stable", "tokens", "cost"],
)
def test_a_window_exactly_at_each_budget_passes(
    budgets: Analysis, canary: RevisionTotals, stable: RevisionTotals | None
) -> None:
    passed = step(budgets, canary, elapsed_s=STEP_S, stable=stable or FAST_STABLE)
    assert passed.outcome is Outcome.PASS, passed.figures.reason
    assert passed.figures.passed


def test_a_mean_exactly_at_a_budget_finer_than_the_figures_rounding_passes() -> None:
    # the status shows 100 tokens per call (rounded to 3 places); the mean is the budget
    budgets = Analysis(minInvocations=20, maxTokensPerInvocation=99.9996)
    canary = calls(10_000, tokens=999_996)
    passed = step(budgets, canary, elapsed_s=STEP_S)
    assert passed.outcome is Outcome.PASS
    assert passed.figures.canary.tokens_per_invocation == 100.0


def test_a_window_breaking_two_budgets_at_its_end_names_both() -> None:
    budgets = Analysis(minInvocations=20, maxP95Ms=400, maxP95RatioToStable=2)
    failed = step(budgets, middling(40), elapsed_s=STEP_S)
    assert failed.figures.reason == (
        "canary p95 480 ms > maxP95Ms 400; "
        "canary p95 480 ms is 5.05x the stable's 95 ms > maxP95RatioToStable 2"
    )


@pytest.mark.parametrize(
    ("canary_ms", "stable", "broken"),
    [
        (50.0, RevisionFigures(invocations=400, p95_ms=40.0), False),  # well within
        (99.9, RevisionFigures(invocations=400, p95_ms=33.3), False),  # 3.0000000000000004
        (50.0, RevisionFigures(invocations=20, p95_ms=10.0), True),  # exactly minInvocations
        (50.0, RevisionFigures(invocations=19, p95_ms=10.0), False),  # too few to compare
        (5.0, RevisionFigures(invocations=400, p95_ms=0.5), True),  # a sub-millisecond stable
        (5.0, RevisionFigures(invocations=400, p95_ms=0.0), False),  # no latency counted
    ],
    ids=["within", "equal-up-to-rounding", "min-calls", "few-calls", "fast-stable", "no-p95"],
)
def test_the_ratio_to_the_stable_is_judged_when_both_p95s_compare(
    canary_ms: float, stable: RevisionFigures, broken: bool
) -> None:
    budgets = Analysis(minInvocations=20, maxP95Ms=5000, maxP95RatioToStable=3)
    canary = RevisionFigures(invocations=40, p95_ms=canary_ms)
    assert bool(analysis.broken_budgets(budgets, canary, stable)) is broken


GUARD = Guard(window="10s", maxErrorPercent=2, maxP95Ms=500)


@pytest.mark.parametrize(
    ("elapsed_s", "within", "over", "reason"),
    [
        pytest.param(
            0.5,  # 5 calls in 0.5 s of 10 s: 100 expected
            calls(5, errors=2),
            calls(5, errors=3),
            "promoted revision errors 3 of 5 calls exceed maxErrorPercent 2 of the 100 calls"
            " expected in the guard window",
            id="error rate",
        ),
        pytest.param(
            2.0,  # 8 calls in 2 s of 10 s: 40 expected
            calls(8, slow=2),
            calls(8, slow=3),
            "promoted revision p95 over maxP95Ms 500: 3 of 8 calls slower, more than 5% of the"
            " 40 expected",
            id="p95",
        ),
    ],
)
def test_the_guard_stops_early_once_a_budget_is_past_what_the_whole_window_allows(
    elapsed_s: float, within: RevisionTotals, over: RevisionTotals, reason: str
) -> None:
    assert window(GUARD, within, elapsed_s=elapsed_s).outcome is Outcome.HOLD
    failed = window(GUARD, over, elapsed_s=elapsed_s)
    assert (failed.outcome, failed.figures.reason) == (Outcome.FAIL, reason)


@pytest.mark.parametrize(
    ("limits", "totals", "reason"),
    [
        pytest.param(
            Guard(window="10s", maxErrorPercent=10),
            calls(5, errors=1),
            "promoted revision errors 1 of 5 calls exceed maxErrorPercent 10 of the 5 calls"
            " expected in the guard window",
            id="error rate",
        ),
        pytest.param(
            Guard(window="10s", maxP95Ms=400),
            middling(40),
            "promoted revision p95 480 ms > maxP95Ms 400",
            id="p95",
        ),
    ],
)
def test_the_guard_judges_the_calls_its_window_saw_at_its_end(
    limits: Guard, totals: RevisionTotals, reason: str
) -> None:
    # during the window, 1 error of 5 calls is within 10% of the 20 calls it may yet see
    assert window(limits, totals, elapsed_s=9.0).outcome is Outcome.HOLD
    failed = window(limits, totals, elapsed_s=10.0)
    assert (failed.outcome, failed.figures.reason) == (Outcome.FAIL, reason)


@pytest.mark.parametrize(
    ("limits", "totals"),
    [
        (Guard(window="10s", maxErrorPercent=10), calls(30, errors=3)),
        (Guard(window="10s", maxP95Ms=480), middling(40)),
    ],
    ids=["error rate", "p95"],
)
def test_a_guard_window_exactly_at_its_budget_passes(limits: Guard, totals: RevisionTotals) -> None:
    assert window(limits, totals, elapsed_s=10.0).outcome is Outcome.PASS


def test_the_guard_has_only_an_error_rate_and_a_p95_budget() -> None:
    assert guard.budgets(GUARD) == Analysis(maxErrorPercent=2, maxP95Ms=500)
    assert guard.budgets(Guard()) == Analysis(maxErrorPercent=2, maxP95Ms=2500)
