"""``plnt replay``: rebuild ``plnt-runs`` from the stream alone."""

import contextlib
import gc
import time
from collections.abc import Iterator
from dataclasses import dataclass

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.history import read_messages
from plnt_common.bus.kv_batch import purge_all, put_all
from plnt_common.bus.kv_snapshot import kv_revisions
from plnt_common.bus.replay_workers import FoldWorkers, worker_count
from plnt_common.errors import Conflict
from plnt_common.logs import get_logger

log = get_logger(__name__)
ATTEMPTS = 3
"""How many times a replay whose writes met a newer write starts over."""


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
    The watcher may be writing the bucket meanwhile: the bucket's revisions are read
    before the stream, and every write and purge is a compare-and-set on them, so a key
    the watcher wrote since (from events this replay may not have read) is never
    overwritten; the replay starts over then, ``ATTEMPTS`` times, and raises ``Conflict``
    after. The cyclic garbage collector is paused throughout (see ``collector_paused``),
    in the workers too. Raises ``PlntError`` when a worker fails; the bucket is then
    untouched.
    """
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return await _replay_once(bus, workers=workers)
        except Conflict as exc:
            log.warning("replay.conflict", attempt=attempt, error=str(exc))
    raise Conflict(
        f"{subjects.RUNS_BUCKET} kept changing while it was replayed ({ATTEMPTS} times): the "
        "watcher is writing it; run plnt replay again, or stop the watcher first"
    )


async def _replay_once(bus: Bus, *, workers: int | None) -> ReplayStats:
    started = time.perf_counter()
    with collector_paused():
        # forked before anything else starts: the workers share no task or thread
        folding = FoldWorkers(workers or worker_count())
        try:
            # before the stream: a write after this read changes a revision, and a write
            # before it folded events the stream read below also holds
            revisions = await kv_revisions(bus.nc, subjects.RUNS_BUCKET)
            count = 0
            async for batch in read_messages(bus.nc):
                count += len(batch)
                folding.deal(batch)
            folded = await folding.projections()
        finally:
            folding.close()
        stored = {key: value for key, (_, value) in revisions.items() if value}
        expected = {key: revision for key, (revision, _) in revisions.items()}
        stale = [key for key in stored if key not in folded]
        changed = {key: value for key, value in folded.items() if stored.get(key) != value}
        await purge_all(bus.nc, subjects.RUNS_BUCKET, stale, expected=expected)
        await put_all(bus.nc, subjects.RUNS_BUCKET, changed, expected=expected)
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
