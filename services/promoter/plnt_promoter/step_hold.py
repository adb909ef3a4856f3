"""Holding one canary step: read the live figures every tick and judge the step's window.

The window starts at the step's first reading of the figures, so a step redelivered after
a crash starts its window again (the crash costs the time already held). Readings that
fail are retried at the next tick; a step with no reading for its whole hold fails. An
operator's abort or ``promote --full`` ends the hold at the next tick (``control``).
"""

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping

from plnt_common.errors import PlntError
from plnt_common.events import Envelope
from plnt_common.figures import FiguresSource, RevisionTotals, window_by_revision
from plnt_common.logs import get_logger
from plnt_common.resources import AnalysisStatus, Canary
from plnt_promoter import analysis

log = get_logger(__name__)

TICK_S = 1.0
"""Between two judgements of a held step."""


async def hold_step(
    *,
    figures: FiguresSource,
    namespace: str,
    name: str,
    plan: Canary,
    step: str,
    canary_revision: str,
    stable_revision: str,
    still_current: Callable[[], Awaitable[bool]],
    operator_request: Callable[[], Awaitable[Envelope | None]],
    tick_s: float = TICK_S,
    clock: Callable[[], float] = time.monotonic,
) -> analysis.Judgement | Envelope | None:
    """The step's verdict (PASS or FAIL), the operator's request that ended the hold, or
    None once the saga is no longer current."""
    interval_s = plan.step_interval_s
    started = clock()
    baseline: Mapping[str, RevisionTotals] | None = None
    problem = ""
    while await still_current():
        request = await operator_request()
        if request is not None:
            return request
        try:
            reading = await figures.totals(namespace=namespace, name=name)
        except PlntError as exc:  # the source is away: try again at the next tick
            reading, problem = None, str(exc)
            log.warning("analysis.figures_unavailable", error=problem)
        now = clock()
        if reading is not None and baseline is None:
            baseline, started = reading, now
        elif reading is not None and baseline is not None:
            windows = window_by_revision(reading, baseline)
            judgement = analysis.judge_step(
                analysis=plan.analysis,
                canary=windows.get(canary_revision, RevisionTotals()),
                stable=windows.get(stable_revision, RevisionTotals()),
                elapsed_s=now - started,
                interval_s=interval_s,
                step=step,
            )
            if judgement.outcome is not analysis.Outcome.HOLD:
                return judgement
        elif now - started >= analysis.hold_s(interval_s):
            reason = f"no live figures for {now - started:.1f}s: {problem}"
            return analysis.Judgement(
                analysis.Outcome.FAIL, AnalysisStatus(step=step, reason=reason)
            )
        await asyncio.sleep(tick_s)
    return None
