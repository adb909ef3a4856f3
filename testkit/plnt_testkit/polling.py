"""Recording how something the stack shows changes while a test acts on it."""

import asyncio
import contextlib
import operator
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from plnt_common.tasks import cancelled

T = TypeVar("T")


@contextlib.asynccontextmanager
async def recorded_changes(
    read: Callable[[], Awaitable[T | None]],
    *,
    same: Callable[[T, T], bool] = operator.eq,
    interval_s: float = 0.02,
) -> AsyncIterator[list[T]]:
    """Every change of what ``read`` returns while the block runs, in order: a value is
    recorded when it is not ``same`` as the last one recorded (None: nothing to record
    this time, e.g. a key not written yet)."""
    seen: list[T] = []

    async def poll() -> None:
        while True:
            now = await read()
            if now is not None and (not seen or not same(seen[-1], now)):
                seen.append(now)
            await asyncio.sleep(interval_s)

    task = asyncio.create_task(poll())
    try:
        yield seen
    finally:
        await cancelled(task)  # reads are NATS requests: see cancelled()
