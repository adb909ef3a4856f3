"""Judging a canary step on its live window: early failure when a budget is certainly
broken, the full judgement at the interval's end, the bounded wait for traffic."""

import math

import pytest

from plnt_common.figures import RevisionTotals
from plnt_common.resources import Analysis
from plnt_promoter import analysis
from plnt_promoter.analysis import Outcome

INF = math.inf
BUDGETS = Analysis(minInvocations=20, maxErrorPercent=1, maxP95Ms=500)


def calls(
    n: int, *, errors: int = 0, slow: int = 0, tokens: int = 0, cost: float = 0.0
) -> RevisionTotals:
    """``n`` calls, ``slow`` of them taking over 1 s, the rest under 0.1 s."""
    buckets = ((0.1, n - slow), (0.5, n - slow), (1.0, n - slow), (INF, n))
    return RevisionTotals(
        invocations=n, errors=errors, latency_buckets=buckets, tokens=tokens, cost_usd=cost
    )


def judge(
    canary: RevisionTotals,
    *,
    elapsed_s: float,
    stable: RevisionTotals | None = None,
    budgets: Analysis = BUDGETS,
    interval_s: float = 30.0,
) -> analysis.Judgement:
    return analysis.judge_step(
        analysis=budgets,
        canary=canary,
        stable=stable or calls(400),
        elapsed_s=elapsed_s,
        interval_s=interval_s,
        step="1/2",
    )


def test_a_healthy_step_holds_until_its_interval_ends_then_passes_with_both_figures() -> None:
    assert judge(calls(40), elapsed_s=29.0).outcome is Outcome.HOLD
    passed = judge(calls(40), elapsed_s=30.0, stable=calls(800))
    assert passed.outcome is Outcome.PASS
    assert passed.figures.passed and passed.figures.step == "1/2"
    assert (passed.figures.canary.invocations, passed.figures.stable.invocations) == (40, 800)
    assert passed.figures.canary.p95_ms == pytest.approx(95.0)
    assert "40 canary calls" in passed.figures.reason


def test_errors_beyond_the_steps_budget_at_the_observed_rate_fail_before_the_interval_ends() -> (
    None
):
    # 2.5 calls/s for 30 s: 75 calls expected, 1 % of them is 0.75 errors
    failed = judge(calls(5, errors=1), elapsed_s=2.0)
    assert failed.outcome is Outcome.FAIL
    assert "maxErrorPercent 1" in failed.figures.reason
    assert "75 calls expected" in failed.figures.reason
    assert failed.figures.canary.error_percent == 20.0


def test_errors_within_what_the_expected_calls_allow_keep_the_step_holding() -> None:
    # 300 calls expected (10/s for 30 s), 1 % is 3 errors: 3 seen do not exceed it yet
    assert judge(calls(20, errors=3), elapsed_s=2.0).outcome is Outcome.HOLD
    assert judge(calls(20, errors=4), elapsed_s=2.0).outcome is Outcome.FAIL


def test_the_expected_count_is_never_below_min_invocations_so_one_early_error_may_wait() -> None:
    budgets = Analysis(minInvocations=200, maxErrorPercent=1, maxP95Ms=500)
    # 1 call in 1 s projects 30, but minInvocations 200 allows 2 errors
    assert judge(calls(1, errors=1), elapsed_s=1.0, budgets=budgets).outcome is Outcome.HOLD
    assert judge(calls(3, errors=3), elapsed_s=1.0, budgets=budgets).outcome is Outcome.FAIL


def test_calls_certainly_slower_than_max_p95_fail_early() -> None:
    # 100 calls expected; more than 5 certainly over 500 ms (in buckets above 0.5 s)
    assert judge(calls(10, slow=5), elapsed_s=3.0).outcome is Outcome.HOLD
    failed = judge(calls(10, slow=6), elapsed_s=3.0)
    assert failed.outcome is Outcome.FAIL
    assert "maxP95Ms 500" in failed.figures.reason


def test_a_p95_over_budget_at_the_end_fails_naming_the_figure() -> None:
    # every call between 0.1 and 0.5 s: over 400 ms is likely, never certain, so it holds
    budgets = Analysis(minInvocations=20, maxErrorPercent=1, maxP95Ms=400)
    middling = RevisionTotals(invocations=40, latency_buckets=((0.1, 0), (0.5, 40), (INF, 40)))
    assert judge(middling, elapsed_s=29.0, budgets=budgets).outcome is Outcome.HOLD
    failed = judge(middling, elapsed_s=30.0, budgets=budgets)
    assert failed.outcome is Outcome.FAIL
    assert failed.figures.reason == "canary p95 480 ms > maxP95Ms 400"


def test_too_little_traffic_waits_one_more_interval_then_fails_never_passes() -> None:
    assert judge(calls(19), elapsed_s=30.0).outcome is Outcome.HOLD
    assert judge(calls(19), elapsed_s=59.9).outcome is Outcome.HOLD
    failed = judge(calls(19), elapsed_s=60.0)
    assert failed.outcome is Outcome.FAIL
    assert (
        failed.figures.reason == "not enough traffic: 19 canary calls in 60.0s, minInvocations 20"
    )
    assert judge(RevisionTotals(), elapsed_s=60.0).outcome is Outcome.FAIL


def test_traffic_arriving_during_the_wait_lets_the_step_pass() -> None:
    assert judge(calls(20), elapsed_s=45.0).outcome is Outcome.PASS


def test_the_ratio_to_the_stable_is_judged_when_the_stable_saw_enough_calls() -> None:
    budgets = Analysis(minInvocations=20, maxErrorPercent=1, maxP95Ms=5000, maxP95RatioToStable=2)
    slow_canary = calls(40, slow=4)  # p95 ~1 s
    fast_stable = calls(400)  # p95 ~95 ms
    failed = judge(slow_canary, elapsed_s=30.0, stable=fast_stable, budgets=budgets)
    assert failed.outcome is Outcome.FAIL
    assert "maxP95RatioToStable 2" in failed.figures.reason
    # a stable with too few calls gives no ratio to judge
    few = judge(slow_canary, elapsed_s=30.0, stable=calls(5), budgets=budgets)
    assert few.outcome is Outcome.PASS


@pytest.mark.parametrize(
    ("budgets", "canary", "figure"),
    [
        (Analysis(maxTokensPerInvocation=100), calls(40, tokens=4_400), "maxTokensPerInvocation"),
        (Analysis(maxCostPerInvocationUsd=0.01), calls(40, cost=0.44), "maxCostPerInvocationUsd"),
    ],
    ids=["tokens", "cost"],
)
def test_mean_tokens_and_cost_over_budget_fail_at_the_end(
    budgets: Analysis, canary: RevisionTotals, figure: str
) -> None:
    failed = judge(canary, elapsed_s=30.0, budgets=budgets)
    assert failed.outcome is Outcome.FAIL
    assert figure in failed.figures.reason
    within = canary.model_copy(
        update={"tokens": canary.tokens // 2, "cost_usd": canary.cost_usd / 2}
    )
    assert judge(within, elapsed_s=30.0, budgets=budgets).outcome is Outcome.PASS


def test_tokens_already_past_the_whole_steps_budget_fail_early() -> None:
    budgets = Analysis(minInvocations=20, maxTokensPerInvocation=100)
    # 40 calls in 3 s project 400; their 40,001 tokens already exceed 100 x 400
    failed = judge(calls(40, tokens=40_001), elapsed_s=3.0, budgets=budgets)
    assert failed.outcome is Outcome.FAIL
    assert judge(calls(40, tokens=39_999), elapsed_s=3.0, budgets=budgets).outcome is Outcome.HOLD


def test_a_step_is_held_at_most_twice_its_interval() -> None:
    assert analysis.hold_s(30.0) == 60.0


def test_calls_slower_than_a_limit_count_only_buckets_wholly_above_it() -> None:
    buckets = ((0.1, 5), (0.5, 8), (1.0, 9), (INF, 10))
    assert analysis.calls_slower_than(0.5, buckets) == 2
    assert analysis.calls_slower_than(0.3, buckets) == 2  # 0.3..0.5 may be fast: not counted
    assert analysis.calls_slower_than(2.0, buckets) == 0
    assert analysis.calls_slower_than(0.5, ()) == 0
