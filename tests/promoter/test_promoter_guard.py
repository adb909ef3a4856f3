"""The guard's judgement of the promoted revision's window (pure), and its checks over a
figures source that counts what the router would have published."""

from collections.abc import Mapping

from plnt_common.errors import PlntError
from plnt_common.figures import RevisionTotals
from plnt_common.resources import Guard
from plnt_promoter import analysis, guard
from plnt_promoter.held_window import HeldWindow

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


async def checked(
    figures: "GrowingFigures | ScriptedFigures",
    *,
    remaining_s: float = 0.3,
    check_s: float = 0.01,
    namespace: str = "default",
    name: str = "x",
) -> tuple[analysis.Judgement, list[float]]:
    """The guard's checks of a window ending ``remaining_s`` after the first check, each
    at the time the one before deferred to (a clock at 100 s); the verdict and the
    deferrals. A reading that raises is a check without figures, as ``guard_promotion``
    makes it."""
    now, window, deferrals = 100.0, None, []
    while len(deferrals) < 1000:
        try:
            reading = await figures.totals(namespace=namespace, name=name)
        except PlntError:
            reading = None
        check = guard.check_guard(
            window=window,
            reading=reading,
            now=now,
            deadline=100.0 + remaining_s,
            guard=GUARD,
            revision="2.0.0-g2",
            check_s=check_s,
        )
        if check.verdict is not None:
            return check.verdict, deferrals
        window, now = check.window, now + check.defer_s
        deferrals.append(check.defer_s)
    raise AssertionError("the guard never answered")


async def test_the_guard_fails_on_the_first_reading_that_breaks_a_budget() -> None:
    failing = GrowingFigures("2.0.0-g2", calls(10, errors=10))
    judged, _ = await checked(failing)
    assert judged.outcome is analysis.Outcome.FAIL
    assert failing.reads == 2  # the baseline, then the first window


async def test_other_revisions_calls_do_not_count() -> None:
    stable_failing = GrowingFigures("1.0.0-g1", calls(10, errors=10))
    judged, _ = await checked(stable_failing)
    assert judged.figures.reason == guard.NO_TRAFFIC


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


async def test_a_window_without_any_reading_passes_nothing_at_its_end() -> None:
    away = ScriptedFigures(PlntError("router unreachable"))
    judged, deferrals = await checked(
        away, remaining_s=0.75, check_s=0.5, namespace="shop", name="review-responder"
    )
    assert judged.outcome is analysis.Outcome.PASS
    assert (judged.figures.reason, judged.figures.window_s) == (guard.NO_TRAFFIC, 0.75)
    # checks at 0, 0.5 and 0.75 s: the last one deferred only until the window ends
    assert deferrals == [0.5, 0.25]
    assert away.asked == [("shop", "review-responder")] * 3


async def test_figures_away_for_a_check_are_read_again_and_the_window_starts_at_the_first() -> None:
    before = {"2.0.0-g2": calls(10, errors=10)}  # served before the window: not judged
    failing = {"2.0.0-g2": calls(20, errors=13)}
    figures = ScriptedFigures(PlntError("away"), before, PlntError("away"), failing)
    judged, _ = await checked(figures, remaining_s=2.0, check_s=0.25)
    assert judged.outcome is analysis.Outcome.FAIL
    assert judged.figures.reason.startswith("promoted revision errors 3 of 10 calls exceed")


def test_a_resumed_window_is_measured_from_its_stored_start_and_baseline() -> None:
    fast = ((0.1, 100), (1.0, 100), (float("inf"), 100))
    stored = HeldWindow(
        started=100.0, baseline={"2.0.0-g2": RevisionTotals(invocations=100, latency_buckets=fast)}
    )
    # at the deadline, 100 calls between 0.1 and 1 s since the start: never certainly
    # over maxP95Ms 500, but the whole window's p95 (955 ms) is
    slower = ((0.1, 100), (1.0, 200), (float("inf"), 200))
    slow = RevisionTotals(invocations=200, latency_buckets=slower)
    check = guard.check_guard(
        window=stored,
        reading={"2.0.0-g2": slow},
        now=104.0,
        deadline=104.0,
        guard=GUARD,
        revision="2.0.0-g2",
    )
    assert check.verdict is not None and check.verdict.outcome is analysis.Outcome.FAIL
    assert check.verdict.figures.window_s == 4.0
    assert check.verdict.figures.canary.invocations == 100
