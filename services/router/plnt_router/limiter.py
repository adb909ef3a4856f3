"""Admission control: at most N calls in flight to runners, a bounded FIFO queue behind them.

The limiter protects runners, not the router: a call holds a slot only while it talks to
a runner. A call that finds the queue full is refused at once (the handler answers 429)
instead of piling up. It reports the queue length through a callback so the metrics
module stays out of this one. It is not a rate limiter (no per-client budgets).
"""

import asyncio
from collections import deque
from collections.abc import Callable


class QueueFull(Exception):
    """Every in-flight slot is taken and the queue already holds ``max_queue`` calls."""


class InFlightLimiter:
    """A semaphore with a bounded, observable wait queue, handing slots over in FIFO order."""

    def __init__(
        self,
        *,
        max_in_flight: int,
        max_queue: int,
        on_queue_change: Callable[[int], None] = lambda depth: None,
    ) -> None:
        self._max_in_flight = max_in_flight
        self._max_queue = max_queue
        self._in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._on_queue_change = on_queue_change

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def queued(self) -> int:
        return len(self._waiters)

    async def acquire(self) -> None:
        """Take a slot, waiting in line if needed. Raises ``QueueFull`` when the line is full."""
        if self._in_flight < self._max_in_flight and not self._waiters:
            self._in_flight += 1
            return
        if len(self._waiters) >= self._max_queue:
            raise QueueFull
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._on_queue_change(len(self._waiters))
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # The slot was handed over just as the caller went away: pass it on.
                self.release()
            elif waiter in self._waiters:
                # ``release`` may already have dropped it as cancelled; then nothing to do.
                self._waiters.remove(waiter)
                self._on_queue_change(len(self._waiters))
            raise

    def release(self) -> None:
        """Give a slot back; the oldest waiter (if any) gets it without a gap."""
        while self._waiters:
            waiter = self._waiters.popleft()
            self._on_queue_change(len(self._waiters))
            if not waiter.done():
                # The slot moves to the waiter directly, so ``_in_flight`` is unchanged
                # and a newcomer cannot jump the queue between release and wake-up.
                waiter.set_result(None)
                return
        self._in_flight -= 1
