"""Admission control: at most N calls in flight, a bounded FIFO queue of waiters behind them.

A call that finds the queue full is refused at once (``Saturated``; the caller answers 429)
instead of piling up in memory. The queue length is reported through a callback so this
module stays free of metrics and I/O: the runner and the router each bind their own gauge.
It is not a rate limiter (no per-client budgets).
"""

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager


class Saturated(Exception):
    """Every in-flight slot is taken and the waiting queue is full."""


class InFlightLimiter:
    """A semaphore with a bounded, observable wait queue, handing slots over in FIFO order."""

    def __init__(
        self,
        *,
        max_in_flight: int,
        max_queue: int,
        on_queue_change: Callable[[int], None] = lambda depth: None,
    ) -> None:
        if max_in_flight < 1 or max_queue < 0:
            raise ValueError("max_in_flight must be >= 1 and max_queue >= 0")
        self.max_in_flight = max_in_flight
        self.max_queue = max_queue
        self._in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._on_queue_change = on_queue_change

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one in-flight slot for the block (see ``acquire``)."""
        await self.acquire()
        try:
            yield
        finally:
            self.release()

    async def acquire(self) -> None:
        """Take a slot, waiting in line if needed; raises ``Saturated`` at once when the line
        is full. A caller cancelled while waiting leaves the line without a slot."""
        if self._in_flight < self.max_in_flight and not self._waiters:
            self._in_flight += 1
            return
        if len(self._waiters) >= self.max_queue:
            raise Saturated
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._on_queue_change(len(self._waiters))
        try:
            await waiter  # release hands its slot over by resolving this future
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot arrived as the caller went away: pass it on
            elif waiter in self._waiters:  # release may already have dropped it
                self._waiters.remove(waiter)
                self._on_queue_change(len(self._waiters))
            raise

    def release(self) -> None:
        """Give a slot back; the oldest live waiter (if any) gets it without a gap."""
        while self._waiters:
            waiter = self._waiters.popleft()
            self._on_queue_change(len(self._waiters))
            if not waiter.done():
                # The slot moves to the waiter directly, so in_flight is unchanged and a
                # newcomer cannot jump the queue between release and wake-up.
                waiter.set_result(None)
                return
        self._in_flight -= 1
