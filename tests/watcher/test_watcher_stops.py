"""The watcher's resource loop stops when asked even if a cancellation is lost.

Python 3.11's ``asyncio.wait_for``, which nats-py awaits on every request, swallows a
cancellation that lands as its inner future completes. A loop that then goes on waiting
for the next change never stops: once, with every core busy, a test's teardown waited on
it until the suite's timeout ended the whole run."""

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from plnt_common.bus.bus import Bus
from plnt_common.tasks import until_stopped
from plnt_watcher.adapters.projections import ProjectionStore
from plnt_watcher.loops import ResourceLoop
from plnt_watcher.ports import ResourceSource

STOPS_WITHIN_S = 5.0


class LosesOneCancellation:
    """A source whose watch waits for changes and loses the first cancellation."""

    def __init__(self) -> None:
        self.waiting = asyncio.Event()
        self.lost = 0

    async def watch(self) -> AsyncIterator[tuple[str, str, dict[str, Any] | None]]:
        while True:
            self.waiting.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.lost += 1
                if self.lost > 1:
                    raise
                # what 3.11's wait_for does to it: gone, and the waiting goes on
            if False:  # an async generator that never yields a change
                yield "", "", None


async def test_a_stopped_resource_loop_ends_though_its_first_cancellation_was_lost(
    nats_url: str,
) -> None:
    bus = await Bus.open(nats_url, service="test")
    source = LosesOneCancellation()
    loop = ResourceLoop(
        bus=bus, source=cast(ResourceSource, source), projections=ProjectionStore(bus.runs)
    )
    stop = asyncio.Event()
    task = asyncio.create_task(loop.run(stop))
    await asyncio.wait_for(source.waiting.wait(), timeout=STOPS_WITHIN_S)

    stop.set()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=STOPS_WITHIN_S)

    try:
        assert done, f"the loop ran on {STOPS_WITHIN_S:g}s after its stop and cancellation"
        assert source.lost == 2  # the lost one, then the one that ended it
    finally:
        task.cancel()
        await bus.close()


async def test_until_stopped_raises_what_the_work_raised() -> None:
    async def fails() -> None:
        raise RuntimeError("the watch broke")

    with pytest.raises(RuntimeError, match="the watch broke"):
        await until_stopped(fails(), asyncio.Event())


async def test_until_stopped_returns_at_once_when_stop_is_set() -> None:
    stop = asyncio.Event()
    stop.set()
    await asyncio.wait_for(until_stopped(asyncio.sleep(3600), stop), timeout=STOPS_WITHIN_S)
