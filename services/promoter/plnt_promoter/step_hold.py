"""Holding one canary step: a deadline re-checked by deferred deliveries, not a held one.

Each delivery of ``canary.stepped`` is one check: it reads the live figures once, judges
the step's window once (``check_step``) and either answers or defers the event to the
next check (``next_check_s``), so a held step takes none of the consumer's slots. The
window starts at the step's first reading of the figures; its start and that reading
(the baseline) are stored (``held_window``), so a check after a restart resumes the same
window. Readings that fail are tried again at the next check; a step with no reading for
its whole hold fails. An operator's abort or ``promote --full`` is answered by its own
delivery meanwhile (``control``), and the next check finds it and ends the hold.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from plnt_common.figures import RevisionTotals, window_by_revision
from plnt_common.resources import AnalysisStatus, Canary
from plnt_promoter import analysis
from plnt_promoter.held_window import HeldWindow, baseline_of

CHECK_S = 1.0
"""Between two checks of a held step or the guard window (one deferred delivery each).
As often as the in-process tick it replaces, so a failing canary, an abort or a
``promote --full`` is still answered within a second; a check costs a few bus reads plus
the deferral's NAK and record, which every held run can afford once a second."""


@dataclass(frozen=True)
class Check:
    """One check of a wait: its verdict, or the window to store and when to check again."""

    window: HeldWindow
    verdict: analysis.Judgement | None = None
    defer_s: float = 0.0


def next_check_s(elapsed_s: float, boundaries: tuple[float, ...], check_s: float) -> float:
    """How long to defer: to the next check, or to the window's next boundary (its end,
    the end of its wait for traffic) when that is sooner, so a step ends on time."""
    ahead = [boundary - elapsed_s for boundary in boundaries if boundary > elapsed_s]
    return max(0.0, min([check_s, *ahead]))


def check_step(
    *,
    window: HeldWindow | None,
    reading: Mapping[str, RevisionTotals] | None,
    problem: str,
    now: float,
    plan: Canary,
    step: str,
    canary_revision: str,
    stable_revision: str,
    check_s: float = CHECK_S,
) -> Check:
    """One check of step ``step`` at ``now`` (epoch seconds) on ``reading`` (None: the
    figures were unavailable, ``problem`` says why). PASS or FAIL, or HOLD as a deferral."""
    interval_s = plan.step_interval_s
    bounds = (interval_s, analysis.hold_s(interval_s))
    held = window or HeldWindow(started=now)
    if reading is not None and held.baseline is None:
        baseline = baseline_of(reading, (canary_revision, stable_revision))
        return Check(HeldWindow(started=now, baseline=baseline), defer_s=min(check_s, bounds[0]))
    elapsed = now - held.started
    if reading is not None and held.baseline is not None:
        windows = window_by_revision(reading, held.baseline)
        judgement = analysis.judge_step(
            analysis=plan.analysis,
            canary=windows.get(canary_revision, RevisionTotals()),
            stable=windows.get(stable_revision, RevisionTotals()),
            elapsed_s=elapsed,
            interval_s=interval_s,
            step=step,
        )
        if judgement.outcome is not analysis.Outcome.HOLD:
            return Check(held, judgement)
    elif elapsed >= bounds[1]:
        reason = f"no live figures for {elapsed:.1f}s: {problem}"
        failed = analysis.Judgement(analysis.Outcome.FAIL, AnalysisStatus(step=step, reason=reason))
        return Check(held, failed)
    return Check(held, defer_s=next_check_s(elapsed, bounds, check_s))
