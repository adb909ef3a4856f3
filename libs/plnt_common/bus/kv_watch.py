"""KV watches that survive a server restart.

A nats-py KV watcher is an ordered push consumer; after the server restarts it can go
silent without an error. ``watch_entries`` therefore starts the watch again after every
reconnection of the client, re-delivering the current values: callers must treat entries
idempotently (every plnt caller does: it reconciles to the latest value).
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from nats.js.kv import KeyValue


class Reconnects:
    """Wakes waiters each time the NATS client has reconnected."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.count = 0

    def mark(self) -> None:
        self.count += 1
        self._event.set()
        self._event = asyncio.Event()

    async def next(self) -> None:
        """Return at the next reconnection after this call."""
        await self._event.wait()


async def watch_entries(
    kv: KeyValue, *, key: str = ">", reconnects: Reconnects | None = None
) -> AsyncIterator[Any]:
    """KV entries of ``key`` (``>`` = all): current values, a ``None`` marker, then updates.

    After a reconnection the sequence starts over with the current values.
    """
    while True:
        watcher = await kv.watch(key)
        reconnected = asyncio.ensure_future(reconnects.next()) if reconnects else None
        following: asyncio.Future[Any] | None = None
        try:
            while True:
                following = asyncio.ensure_future(anext(watcher))
                waiting = {following} | ({reconnected} if reconnected else set())
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if following not in done:
                    following.cancel()
                    break  # reconnected: watch again from the current values
                yield following.result()
        finally:
            if reconnected is not None:
                reconnected.cancel()
            if following is not None:
                following.cancel()  # a closed iterator: its pending read is not wanted
            with contextlib.suppress(Exception):
                await watcher.stop()  # type: ignore[no-untyped-call]


IDLE: Any = object()
"""``next_update``'s answer when nothing arrived in time."""


async def next_update(watcher: Any, timeout_s: float) -> Any:
    """The watcher's next update, or ``IDLE`` after ``timeout_s``; ``StopAsyncIteration``
    once the watcher was stopped.

    Not nats-py's ``updates(timeout)``: its ``asyncio.wait_for`` can swallow a cancellation
    (Python 3.11), and a watch task must stop when it is cancelled.
    """
    try:
        async with asyncio.timeout(timeout_s):
            return await anext(watcher)
    except TimeoutError:
        return IDLE
