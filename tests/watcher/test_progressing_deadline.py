"""The Progressing deadline follows the run's own step: its hold plus the setting."""

from datetime import UTC, datetime, timedelta

from plnt_common.projection import RunProjection
from plnt_common.resources import WorkflowRunStatus
from plnt_common.status import Phase
from plnt_watcher.logic import overdue_phase
from plnt_watcher.settings import WatcherSettings

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)


def progressing(*, held_s: float, step_hold_s: float) -> RunProjection:
    return RunProjection(
        namespace="default",
        name="wf",
        saga_id="default.wf.2.1",
        generation=2,
        rank=5,
        status=WorkflowRunStatus(phase=Phase.PROGRESSING),
        phase_since=NOW - timedelta(seconds=held_s),
        step_hold_s=step_hold_s,
    )


def test_a_long_step_is_not_overdue_before_its_hold_plus_the_margin() -> None:
    deadlines = WatcherSettings().deadlines()
    assert deadlines["Progressing"] == 120.0
    ten_minute_steps = 1200.0  # stepInterval 10m, held at most twice that
    held = progressing(held_s=1300, step_hold_s=ten_minute_steps)
    assert overdue_phase(held, now=NOW, deadlines=deadlines) is None
    stuck = progressing(held_s=1321, step_hold_s=ten_minute_steps)
    assert overdue_phase(stuck, now=NOW, deadlines=deadlines) == ("Progressing", 1320.0)


def test_a_short_step_is_overdue_soon_after_its_hold() -> None:
    deadlines = {"Progressing": 5.0}
    assert overdue_phase(progressing(held_s=7.1, step_hold_s=2), now=NOW, deadlines=deadlines)
    assert not overdue_phase(progressing(held_s=6.9, step_hold_s=2), now=NOW, deadlines=deadlines)
