"""Keeping the previous revision installed at 0 % for ``spec.rollback.keepPreviousFor``.

The installer holds the promotion's ``run.ready`` (the consumer keeps it in progress)
until the event's time plus the window, then retires the kept release. The deadline is
computed from the event, so a delivery after a crash resumes the same window (or retires
at once when it has passed). The hold ends early when the release is no longer kept: a
revert made it the stable again, or a newer promotion retired it.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

TICK_S = 0.5
"""Between two checks that the release is still kept."""


def remaining_s(ready_at: datetime, keep_s: float, *, now: datetime | None = None) -> float:
    """Seconds left of the keep window that started when ``run.ready`` was published."""
    elapsed = ((now or datetime.now(UTC)) - ready_at).total_seconds()
    return max(0.0, keep_s - elapsed)


async def hold_kept(
    *,
    remaining: float,
    still_kept: Callable[[], Awaitable[bool]],
    tick_s: float = TICK_S,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Wait out ``remaining`` seconds; True when the release is still kept at the end."""
    until = clock() + remaining
    while await still_kept():
        left = until - clock()
        if left <= 0:
            return True
        await asyncio.sleep(min(tick_s, left))
    return False
