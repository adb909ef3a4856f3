"""Backpressure: at most ``max_in_flight`` invocations run, at most ``max_queue`` wait.

A request past both limits is refused at once (the handler answers 429 with Retry-After)
instead of piling up in memory. Waiters are served first come, first served. The number of
waiters is exported as ``plnt_queue_depth{component="runner"}``. No I/O here.
"""

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from plnt_common.metrics import QUEUE_DEPTH


class Saturated(Exception):
    """Every in-flight slot is taken and the waiting queue is full."""


class Admission:
    """An in-flight limit with a bounded FIFO of waiters."""

    def __init__(self, *, max_in_flight: int, max_queue: int, component: str = "runner") -> None:
        if max_in_flight < 1 or max_queue < 0:
            raise ValueError("max_in_flight must be >= 1 and max_queue >= 0")
        self.max_in_flight = max_in_flight
        self.max_queue = max_queue
        self.in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._depth = QUEUE_DEPTH.labels(component=component)
        self._depth.set(0)

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one in-flight slot for the block; raises ``Saturated`` at once when the queue
        is full. A caller cancelled while waiting leaves the queue without a slot."""
        await self._acquire()
        try:
            yield
        finally:
            self._release()

    async def _acquire(self) -> None:
        if self.in_flight < self.max_in_flight and not self._waiters:
            self.in_flight += 1
            return
        if len(self._waiters) >= self.max_queue:
            raise Saturated
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._depth.set(len(self._waiters))
        try:
            await waiter  # _release hands its slot over by resolving this future
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release()  # the slot arrived as we were cancelled: pass it on
            elif waiter in self._waiters:  # a release may already have skipped it
                self._waiters.remove(waiter)
                self._depth.set(len(self._waiters))
            raise

    def _release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            self._depth.set(len(self._waiters))
            if not waiter.done():
                waiter.set_result(None)  # in_flight stays: the slot changes hands
                return
        self.in_flight -= 1
