"""Keeping the previous revision installed at 0 % for ``spec.rollback.keepPreviousFor``.

The window is a deadline, not a held delivery: the promotion's ``run.ready`` is deferred
(``Delivery.defer``, a NAK with delay) to its next check, at most ``CHECK_S`` away and
never past the deadline, so a kept release holds none of the consumer's slots. The
deadline is the event's time plus the window, so a delivery after a crash or a restart
resumes the same window (or retires at once when it has passed). A check that finds the
release no longer kept (a revert made it the stable again, or a newer promotion retired
it) ends the window.
"""

from datetime import UTC, datetime

CHECK_S = 30.0
"""Between two checks that the release is still kept; the last check lands on the deadline."""


def remaining_s(ready_at: datetime, keep_s: float, *, now: datetime | None = None) -> float:
    """Seconds left of the keep window that started when ``run.ready`` was published."""
    elapsed = ((now or datetime.now(UTC)) - ready_at).total_seconds()
    return max(0.0, keep_s - elapsed)


def next_check_s(remaining: float) -> float:
    """How long the event is deferred: to the next check, or to the deadline if sooner."""
    return min(CHECK_S, remaining)
