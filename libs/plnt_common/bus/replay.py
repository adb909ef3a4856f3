"""``plnt replay``: rebuild ``plnt-runs`` from the stream alone."""

import asyncio
import contextlib
import gc
import time
from collections.abc import Iterator
from dataclasses import dataclass

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.history import read_messages
from plnt_common.bus.kv_batch import purge_all, put_all
from plnt_common.bus.kv_snapshot import kv_snapshot
from plnt_common.bus.replay_workers import FoldWorkers, worker_count


@dataclass(frozen=True)
class ReplayStats:
    events: int
    runs: int
    seconds: float


async def replay(bus: Bus, *, workers: int | None = None) -> ReplayStats:
    """Fold every stored event and make the bucket hold exactly the result.

    The parent reads the stream and deals its events to ``workers`` forked processes
    (default: one per core, see ``replay_workers``), which decode and fold their runs.
    Keys whose stored value already is the folded projection are left as they are (an
    unchanged key keeps its revision); every other key is written, stale keys purged.
    The bucket's values are the ones read as the stream is read (a write racing the
    replay is as racy either way); reading both at once hides one server wait.
    The cyclic garbage collector is paused throughout (see ``collector_paused``), in the
    workers too. Raises ``PlntError`` when a worker fails; the bucket is then untouched.
    """
    started = time.perf_counter()
    with collector_paused():
        # forked before anything else starts: the workers share no task or thread
        folding = FoldWorkers(workers or worker_count())
        snapshot = asyncio.create_task(kv_snapshot(bus.nc, subjects.RUNS_BUCKET))
        try:
            count = 0
            async for batch in read_messages(bus.nc):
                count += len(batch)
                folding.deal(batch)
            folded = await folding.projections()
        except BaseException:
            snapshot.cancel()
            raise
        finally:
            folding.close()
        stored = {k: v for k, (_, v) in (await snapshot).items()}
        stale = [key for key in stored if key not in folded]
        changed = {key: value for key, value in folded.items() if stored.get(key) != value}
        await purge_all(bus.nc, subjects.RUNS_BUCKET, stale)
        await put_all(bus.nc, subjects.RUNS_BUCKET, changed)
    return ReplayStats(events=count, runs=len(folded), seconds=time.perf_counter() - started)


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
