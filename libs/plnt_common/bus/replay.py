"""``plnt replay``: rebuild ``plnt-runs`` from the stream alone."""

import asyncio
import contextlib
import gc
import time
from collections.abc import Iterator
from dataclasses import dataclass

from nats.js.errors import KeyDeletedError, KeyNotFoundError

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.history import read_payloads
from plnt_common.bus.kv_batch import bucket_stream, put_all
from plnt_common.errors import SpecInvalid
from plnt_common.events import decode_event
from plnt_common.projection import ProjectionFold

WRITES_IN_FLIGHT = 64


@dataclass(frozen=True)
class ReplayStats:
    events: int
    runs: int
    seconds: float


async def replay(bus: Bus) -> ReplayStats:
    """Fold every stored event and make the bucket hold exactly the result.

    Keys whose stored value already is the folded projection are left as they are (an
    unchanged key keeps its revision); every other key is written, stale keys purged.
    """
    started = time.perf_counter()
    fold = ProjectionFold()
    count = 0
    async for batch in read_payloads(bus.nc):
        count += len(batch)
        with collector_paused():
            for payload in batch:
                try:
                    event = decode_event(payload)
                except SpecInvalid:
                    continue  # a poison message: history only, as the watcher treats it
                fold.add(event)
    with collector_paused():
        folded = {key: p.model_dump_json().encode() for key, p in fold.projections().items()}
    stored = await stored_projections(bus)
    stale = [key for key in stored if key not in folded]
    changed = {key: value for key, value in folded.items() if stored.get(key) != value}
    slots = asyncio.Semaphore(WRITES_IN_FLIGHT)  # independent keys: purge them concurrently

    async def purge(key: str) -> None:
        async with slots:
            await bus.runs.purge(key)

    await asyncio.gather(*(purge(key) for key in stale))
    await put_all(bus.nc, subjects.RUNS_BUCKET, changed)
    return ReplayStats(events=count, runs=len(folded), seconds=time.perf_counter() - started)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block (which must not await).

    Decoding and folding a batch allocates a great many objects, most short-lived; the
    collections they would trigger cost about a tenth of replay's time. Reference
    counting still frees them, and collection resumes after the block.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def stored_projections(bus: Bus) -> dict[str, bytes]:
    """Every key of ``plnt-runs`` with its current value (deleted and purged keys left out).

    Read with a watch, then checked against the stream's own list of subjects: nats-py's
    watch can end its initial values before delivering them, so a key the watch did not
    report either way is read on its own.
    """
    kv = bus.runs
    watcher = await kv.watchall()
    values: dict[str, bytes] = {}
    gone: set[str] = set()
    try:
        async for entry in watcher:
            if entry is None:  # the current values have all been delivered
                break
            if entry.operation in ("DEL", "PURGE") or not entry.value:
                gone.add(entry.key)
            else:
                values[entry.key] = entry.value
    finally:
        await watcher.stop()  # type: ignore[no-untyped-call]
    prefix = f"$KV.{subjects.RUNS_BUCKET}."
    stream = bucket_stream(subjects.RUNS_BUCKET)
    subjects_held = (await bus.js.stream_info(stream, subjects_filter=prefix + ">")).state.subjects
    for subject in subjects_held or {}:
        key = subject.removeprefix(prefix)
        if key in values or key in gone:
            continue
        try:
            entry = await kv.get(key)
        except (KeyNotFoundError, KeyDeletedError):
            continue
        if entry.value:
            values[key] = entry.value
    return values
