"""``plnt replay``: rebuild ``plnt-runs`` from the stream alone."""

import asyncio
import contextlib
import gc
import time
from collections.abc import Iterator
from dataclasses import dataclass

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.history import read_payloads
from plnt_common.bus.kv_batch import purge_all, put_all
from plnt_common.bus.kv_snapshot import kv_snapshot
from plnt_common.errors import SpecInvalid
from plnt_common.events import decode_event
from plnt_common.projection import ProjectionFold


@dataclass(frozen=True)
class ReplayStats:
    events: int
    runs: int
    seconds: float


async def replay(bus: Bus) -> ReplayStats:
    """Fold every stored event and make the bucket hold exactly the result.

    Keys whose stored value already is the folded projection are left as they are (an
    unchanged key keeps its revision); every other key is written, stale keys purged.
    The bucket's values are the ones read as the stream is read (a write racing the
    replay is as racy either way); reading both at once hides one server wait.
    The cyclic garbage collector is paused throughout (see ``collector_paused``).
    """
    started = time.perf_counter()
    with collector_paused():
        snapshot = asyncio.create_task(kv_snapshot(bus.nc, subjects.RUNS_BUCKET))
        try:
            fold, count = await _fold_stream(bus)
        except BaseException:
            snapshot.cancel()
            raise
        folded = {key: p.model_dump_json().encode() for key, p in fold.projections().items()}
        stored = {k: v for k, (_, v) in (await snapshot).items()}
        stale = [key for key in stored if key not in folded]
        changed = {key: value for key, value in folded.items() if stored.get(key) != value}
        await purge_all(bus.nc, subjects.RUNS_BUCKET, stale)
        await put_all(bus.nc, subjects.RUNS_BUCKET, changed)
    return ReplayStats(events=count, runs=len(folded), seconds=time.perf_counter() - started)


async def _fold_stream(bus: Bus) -> tuple[ProjectionFold, int]:
    """Every stored event folded, and how many messages were read."""
    fold = ProjectionFold()
    count = 0
    async for batch in read_payloads(bus.nc):
        count += len(batch)
        for payload in batch:
            try:
                event = decode_event(payload)
            except SpecInvalid:
                continue  # a poison message: history only, as the watcher treats it
            fold.add(event)
    return fold, count


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block.

    Replay allocates a great many objects, most short-lived, while what it builds grows:
    each collection walks all of it again, and together they cost a third of replay's
    time. Reference counting still frees what is dropped (replay makes few cycles), and
    collection resumes after the block. The pause is process-wide, also across awaits:
    meant for a command doing this one job (``plnt replay``), not inside a service.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
