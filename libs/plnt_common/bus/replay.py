"""``plnt replay``: rebuild ``plnt-runs`` from the stream alone."""

import asyncio
import time
from dataclasses import dataclass

from nats.js.errors import NoKeysError

from plnt_common.bus.bus import Bus
from plnt_common.bus.history import read_events
from plnt_common.projection import RunProjection, fold_into

WRITES_IN_FLIGHT = 64


@dataclass(frozen=True)
class ReplayStats:
    events: int
    runs: int
    seconds: float


async def replay(bus: Bus) -> ReplayStats:
    """Fold every stored event and replace the bucket's contents with the result."""
    started = time.perf_counter()
    projections: dict[str, RunProjection] = {}
    count = 0
    async for stored in read_events(bus.js):
        count += 1
        if stored.event is not None:
            fold_into(projections, stored.event)
    try:
        stale = [key for key in await bus.runs.keys() if key not in projections]
    except NoKeysError:
        stale = []
    slots = asyncio.Semaphore(WRITES_IN_FLIGHT)  # independent keys: write them concurrently

    async def purge(key: str) -> None:
        async with slots:
            await bus.runs.purge(key)

    async def put(key: str, projection: RunProjection) -> None:
        async with slots:
            await bus.runs.put(key, projection.model_dump_json().encode())

    await asyncio.gather(*(purge(key) for key in stale))
    await asyncio.gather(*(put(key, p) for key, p in projections.items()))
    return ReplayStats(events=count, runs=len(projections), seconds=time.perf_counter() - started)
