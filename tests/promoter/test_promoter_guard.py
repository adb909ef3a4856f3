"""The guard's judgement of the promoted revision's window (pure), and its hold over a
figures source that counts what the router would have published."""

import asyncio
from collections.abc import Mapping

import pytest
import structlog

from plnt_common.errors import PlntError
from plnt_common.figures import RevisionTotals
from plnt_common.resources import Guard
from plnt_promoter import analysis, guard

GUARD = Guard(window="10s", maxErrorPercent=2, maxP95Ms=500)
FAST = ((0.1, 0), (0.25, 0), (float("inf"), 0))


def calls(n: int, *, errors: int = 0, slow: int = 0) -> RevisionTotals:
    """``n`` calls, ``slow`` of them above 1 s, the rest within 100 ms."""
    buckets = ((0.1, n - slow), (1.0, n - slow), (float("inf"), n))
    return RevisionTotals(invocations=n, errors=errors, latency_buckets=buckets)


def judge(totals: RevisionTotals, elapsed_s: float) -> analysis.Judgement:
    return guard.judge_window(GUARD, totals, elapsed_s=elapsed_s, interval_s=10)


def test_errors_that_break_the_budget_for_the_whole_window_fail_at_once() -> None:
    early = judge(calls(5, errors=3), elapsed_s=0.5)
    assert early.outcome is analysis.Outcome.FAIL
    assert early.figures.reason == (
        "promoted revision errors 3 of 5 calls exceed maxErrorPercent 2 of the 100 calls"
        " expected in the guard window"
    )
    assert early.figures.canary.invocations == 5


def test_an_error_the_window_can_still_absorb_holds_then_fails_at_the_end() -> None:
    assert judge(calls(200, errors=1), elapsed_s=1).outcome is analysis.Outcome.HOLD
    end = judge(calls(40, errors=1), elapsed_s=10)
    assert end.outcome is analysis.Outcome.FAIL
    assert "promoted revision errors 1 of 40 calls exceed maxErrorPercent 2" in end.figures.reason


def test_slow_calls_fail_on_max_p95() -> None:
    failed = judge(calls(100, slow=10), elapsed_s=10)
    assert failed.outcome is analysis.Outcome.FAIL
    assert failed.figures.reason.startswith("promoted revision p95 over maxP95Ms 500")


def test_good_calls_pass_at_the_end_of_the_window_and_hold_before() -> None:
    assert judge(calls(100), elapsed_s=9.9).outcome is analysis.Outcome.HOLD
    passed = judge(calls(100), elapsed_s=10)
    assert passed.outcome is analysis.Outcome.PASS
    assert passed.figures.reason.startswith("100 calls, error 0%, p95 ")
    assert "canary" not in passed.figures.reason


def test_no_traffic_passes_nothing_and_fails_nothing() -> None:
    assert judge(RevisionTotals(), elapsed_s=5).outcome is analysis.Outcome.HOLD
    quiet = judge(RevisionTotals(), elapsed_s=10)
    assert quiet.outcome is analysis.Outcome.PASS
    assert quiet.figures.reason == guard.NO_TRAFFIC


def test_without_max_p95_the_step_analysis_default_applies() -> None:
    assert guard.budgets(Guard()).max_p95_ms == 2500
    assert guard.budgets(GUARD).max_error_percent == 2


class GrowingFigures:
    """Totals that grow by ``per_read`` calls of ``revision`` at every read."""

    def __init__(self, revision: str, per_read: RevisionTotals) -> None:
        self.revision, self.per_read, self.reads = revision, per_read, 0
        self.asked: set[tuple[str, str]] = set()

    async def totals(self, *, namespace: str, name: str) -> Mapping[str, RevisionTotals]:
        self.reads += 1
        self.asked.add((namespace, name))
        step = self.per_read
        return {
            self.revision: RevisionTotals(
                invocations=step.invocations * self.reads,
                errors=step.errors * self.reads,
                latency_buckets=tuple((b, c * self.reads) for b, c in step.latency_buckets),
            )
        }


async def hold(figures: GrowingFigures, current: list[bool]) -> analysis.Judgement | None:
    async def still_current() -> bool:
        return current.pop(0) if current else True

    return await guard.hold_guard(
        figures=figures,
        namespace="default",
        name="x",
        guard=GUARD,
        revision="2.0.0-g2",
        remaining_s=0.3,
        still_current=still_current,
        tick_s=0.01,
    )


async def test_the_hold_fails_on_the_first_reading_that_breaks_a_budget() -> None:
    failing = GrowingFigures("2.0.0-g2", calls(10, errors=10))
    judged = await hold(failing, [])
    assert judged is not None and judged.outcome is analysis.Outcome.FAIL
    assert failing.reads == 2  # the baseline, then the first window


async def test_the_hold_ends_with_nothing_once_no_longer_current() -> None:
    failing = GrowingFigures("2.0.0-g2", calls(10, errors=10))
    assert await hold(failing, [True, False]) is None


async def test_other_revisions_calls_do_not_count() -> None:
    stable_failing = GrowingFigures("1.0.0-g1", calls(10, errors=10))
    judged = await hold(stable_failing, [])
    assert judged is not None and judged.figures.reason == guard.NO_TRAFFIC


def test_few_calls_are_judged_on_the_whole_window_at_its_end() -> None:
    lenient = Guard(window="10s", maxErrorPercent=10)
    # 1 error in 5 calls is within 10% of the 20 calls a window is expected to see ...
    held = guard.judge_window(lenient, calls(5, errors=1), elapsed_s=9, interval_s=10)
    assert held.outcome is analysis.Outcome.HOLD
    # ... but the window ended with 20% errors: judged against the 5 calls it saw
    end = guard.judge_window(lenient, calls(5, errors=1), elapsed_s=10, interval_s=10)
    assert end.outcome is analysis.Outcome.FAIL
    assert "errors 1 of 5 calls exceed maxErrorPercent 10 of the 5 calls" in end.figures.reason


class ScriptedFigures:
    """Answers each read with the next of ``script`` (a reading, or an error to raise),
    the last one again once the script ends; records who asked."""

    def __init__(self, *script: Mapping[str, RevisionTotals] | PlntError) -> None:
        self.script, self.asked = list(script), []

    async def totals(self, *, namespace: str, name: str) -> Mapping[str, RevisionTotals]:
        self.asked.append((namespace, name))
        answer = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(answer, PlntError):
            raise answer
        return answer


class SteppingClock:
    """A monotonic clock at 100 s that moves 0.25 s each time it is read."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return 100.0 + 0.25 * (self.reads - 1)


async def hold_scripted(
    figures: ScriptedFigures, remaining_s: float = 0.75, tick_s: float = 0.001
) -> analysis.Judgement | None:
    async def still_current() -> bool:
        return True

    # started at 100.0, the clock read twice a tick: readings judged at 0.25, 0.75, 1.25 s...
    return await guard.hold_guard(
        figures=figures,
        namespace="shop",
        name="review-responder",
        guard=GUARD,
        revision="2.0.0-g2",
        remaining_s=remaining_s,
        still_current=still_current,
        tick_s=tick_s,
        clock=SteppingClock(),
    )


async def test_a_window_without_any_reading_passes_nothing_at_its_end() -> None:
    away = ScriptedFigures(PlntError("router unreachable"))
    with structlog.testing.capture_logs() as logs:
        judged = await hold_scripted(away)
    assert judged is not None and judged.outcome is analysis.Outcome.PASS
    assert (judged.figures.reason, judged.figures.window_s) == (guard.NO_TRAFFIC, 0.75)
    assert away.asked == [("shop", "review-responder")] * 2  # at 0.25 s and at 0.75 s
    unavailable = [line for line in logs if line["event"] == "guard.figures_unavailable"]
    assert [line["error"] for line in unavailable] == ["router unreachable"] * 2


async def test_figures_away_for_a_tick_are_read_again_and_the_window_starts_at_the_first() -> None:
    before = {"2.0.0-g2": calls(10, errors=10)}  # served before the window: not judged
    failing = {"2.0.0-g2": calls(20, errors=13)}
    figures = ScriptedFigures(PlntError("away"), before, PlntError("away"), failing)
    judged = await hold_scripted(figures, remaining_s=2.0)
    assert judged is not None and judged.outcome is analysis.Outcome.FAIL
    assert judged.figures.reason.startswith("promoted revision errors 3 of 10 calls exceed")


async def test_the_last_tick_sleeps_only_until_the_window_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []
    sleep = asyncio.sleep

    async def recorded(delay: float) -> None:
        slept.append(delay)
        await sleep(0)

    monkeypatch.setattr(asyncio, "sleep", recorded)
    # a tick of 0.5 s, 0.5 s into a 0.75 s window: 0.25 s left
    judged = await hold_scripted(ScriptedFigures(PlntError("away")), tick_s=0.5)
    assert judged is not None and judged.figures.reason == guard.NO_TRAFFIC
    assert slept == [0.25]
