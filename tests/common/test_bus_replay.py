"""``plnt replay`` against a real nats-server: the batch reader, the fold, only changed writes."""

import asyncio
import gc
import multiprocessing
import os
import random
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from functools import partial
from multiprocessing.connection import Connection

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.errors import KeyDeletedError, KeyNotFoundError
from test_projection import fold_one_by_one, happy_saga, random_history

from plnt_common import subjects
from plnt_common.bus import replay as replay_module
from plnt_common.bus import replay_workers
from plnt_common.bus.bus import Bus
from plnt_common.bus.history import read_messages
from plnt_common.bus.kv_snapshot import kv_snapshot
from plnt_common.bus.replay import collector_paused, replay
from plnt_common.errors import BusUnavailable, Conflict, PlntError
from plnt_common.events import Envelope, EventType
from plnt_common.projection import ProjectionFold, RunProjection


async def store_histories(bus: Bus, *, seed: int, histories: int, first: int = 0) -> list[Envelope]:
    """Generated histories of runs in namespaces ``ns-<first + i>``, stored as they are:
    duplicates included (no ``Nats-Msg-Id``)."""
    rng = random.Random(seed)
    namespaces = [f"ns-{first + i}" for i in range(histories)]
    events = [e for namespace in namespaces for e in random_history(rng, namespace=namespace)]
    for event in events:
        subject = subjects.event_subject(event.event_type, event.namespace, event.name)
        await bus.js.publish(subject, event.model_dump_json().encode())
    return events


async def bucket(bus: Bus, keys: set[str]) -> dict[str, tuple[bytes, int]]:
    """The value and revision of each of ``keys`` that holds a value.

    Read key by key: nats-py's ``keys()`` can report an empty bucket when the server
    delivers the listing before the client has counted any of it.
    """
    found = {}
    for key in keys:
        try:
            entry = await bus.runs.get(key)
        except (KeyNotFoundError, KeyDeletedError):
            continue
        found[key] = (entry.value or b"", entry.revision or 0)
    return found


async def values_of(bus: Bus, keys: set[str]) -> dict[str, bytes]:
    """The value of each of ``keys`` that holds one."""
    return {key: value for key, (value, _) in (await bucket(bus, keys)).items()}


def serialised(projections: dict[str, RunProjection]) -> dict[str, bytes]:
    """The projections as replay writes them."""
    return {key: projection.model_dump_json().encode() for key, projection in projections.items()}


def stored_as(events: list[Envelope]) -> list[tuple[str, bytes, str]]:
    """(subject, payload, traceparent) of each of ``events`` as ``store_histories`` stored
    them (untraced)."""
    return [
        (
            subjects.event_subject(e.event_type, e.namespace, e.name),
            e.model_dump_json().encode(),
            "",
        )
        for e in events
    ]


async def test_read_messages_returns_every_stored_message_oldest_first_in_batches(
    bus: Bus,
) -> None:
    events = await store_histories(bus, seed=1, histories=4)
    batches = [batch async for batch in read_messages(bus.nc, batch=7)]
    assert [len(b) for b in batches[:-1]] == [7] * (len(batches) - 1)
    assert [m for b in batches for m in b] == stored_as(events)
    info = await bus.js.stream_info(subjects.STREAM)
    assert info.state.consumer_count == 0  # the reader's consumer is gone


async def test_read_messages_keeps_to_its_filter_and_reads_nothing_from_an_empty_stream(
    bus: Bus,
) -> None:
    assert [batch async for batch in read_messages(bus.nc)] == []
    events = await store_histories(bus, seed=2, histories=3)
    deleted = subjects.event_filter(EventType.RUN_DELETED)
    read = [m async for batch in read_messages(bus.nc, filter_subject=deleted) for m in batch]
    assert read == stored_as([e for e in events if e.event_type is EventType.RUN_DELETED])


@pytest.mark.parametrize("workers", [1, 3])
async def test_replay_leaves_the_bucket_holding_the_one_by_one_fold_of_the_stream(
    bus: Bus, workers: int
) -> None:
    events = await store_histories(bus, seed=3, histories=40)
    await bus.js.publish(subjects.event_subject(EventType.RUN_READY, "ns-0", "x"), b"{poison")
    expected, _ = fold_one_by_one(events)
    assert len(expected) > 20
    wrong_key, stale_key = next(iter(expected)), "ns-gone.old"
    await bus.runs.put(wrong_key, b"{}")
    await bus.runs.put(stale_key, b"{}")

    started = time.perf_counter()
    stats = await replay(bus, workers=workers)  # 3: each run's events dealt to one of them
    took = time.perf_counter() - started

    assert (stats.events, stats.runs) == (len(events) + 1, len(expected))
    assert 0 < stats.seconds <= took  # what `plnt replay` prints as its time
    assert await values_of(bus, {*expected, wrong_key, stale_key}) == serialised(expected)


async def test_replay_folds_every_batch_and_the_events_after_a_poison_message(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = await store_histories(bus, seed=5, histories=6)
    await bus.js.publish(subjects.event_subject(EventType.RUN_READY, "ns-0", "x"), b"{poison")
    after = await store_histories(bus, seed=6, histories=6, first=6)
    # small batches: the poison message lands mid-batch and the stream spans many
    monkeypatch.setattr(replay_module, "read_messages", partial(read_messages, batch=7))

    stats = await replay(bus)

    expected, _ = fold_one_by_one([*before, *after])
    assert (stats.events, stats.runs) == (len(before) + 1 + len(after), len(expected))
    assert await values_of(bus, set(expected)) == serialised(expected)


async def test_replay_does_not_rewrite_keys_that_already_hold_the_result(bus: Bus) -> None:
    events = await store_histories(bus, seed=4, histories=10)
    keys = set(fold_one_by_one(events)[0])
    await replay(bus)
    before = await bucket(bus, keys)
    assert len(before) == len(keys)
    await replay(bus)
    assert await bucket(bus, keys) == before  # same values, same revisions


async def test_replay_never_overwrites_what_the_watcher_wrote_while_it_read_the_stream(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store_histories(bus, seed=8, histories=4)
    saga = happy_saga()
    for item in saga[:-1]:
        await bus.publish(item)
    (key,) = fold_one_by_one(saga)[0]
    newest = serialised(fold_one_by_one(saga)[0])[key]
    assert newest != serialised(fold_one_by_one(saga[:-1])[0])[key]
    written: list[int] = []
    reads = read_messages

    async def read_while_the_watcher_writes(nc: Client) -> AsyncIterator[list[Msg]]:
        async for batch in reads(nc):
            yield batch
            if not written:  # the live watcher folds the saga's last event meanwhile
                await bus.publish(saga[-1])
                written.append(await bus.runs.put(key, newest))

    monkeypatch.setattr(replay_module, "read_messages", read_while_the_watcher_writes)
    await replay(bus)
    # the first pass read the stream without that event: its value for the key would
    # have gone over the watcher's; the pass after it folds the event too
    assert await bucket(bus, {key}) == {key: (newest, written[0])}


async def test_replay_gives_up_naming_the_watcher_when_the_bucket_keeps_changing(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    saga = happy_saga()
    for item in saga:
        await bus.publish(item)
    (key,) = fold_one_by_one(saga)[0]
    reads = read_messages

    async def read_while_a_writer_scribbles(nc: Client) -> AsyncIterator[list[Msg]]:
        async for batch in reads(nc):
            yield batch
            await bus.runs.put(key, b"{}")

    monkeypatch.setattr(replay_module, "read_messages", read_while_a_writer_scribbles)
    with pytest.raises(Conflict, match="watcher"):
        await replay(bus)
    assert await values_of(bus, {key}) == {key: b"{}"}


def test_collector_paused_turns_collection_back_on_only_if_it_was_on() -> None:
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


async def test_a_worker_gets_every_share_before_the_end_of_the_stream_however_slow_sending(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = await store_histories(bus, seed=10, histories=10)
    last = happy_saga()[0]  # a run opened by the stream's last message, in the last share
    await bus.js.publish(
        subjects.event_subject(last.event_type, last.namespace, last.name),
        last.model_dump_json().encode(),
    )
    events.append(last)
    real_send = Connection.send
    shares_to: Counter[int] = Counter()

    def slow_send(pipe: Connection, obj: object) -> None:
        if isinstance(obj, list):  # a share, from the parent
            shares_to[pipe.fileno()] += 1
            time.sleep(0.02)  # the parent has read the stream long before the last share
        real_send(pipe, obj)

    monkeypatch.setattr(Connection, "send", slow_send)
    monkeypatch.setattr(replay_module, "read_messages", partial(read_messages, batch=4))

    await replay(bus, workers=2)

    assert len(shares_to) == 2  # the runs were dealt to both workers

    expected, _ = fold_one_by_one(events)
    assert await values_of(bus, set(expected)) == serialised(expected)


async def test_a_worker_that_dies_fails_the_replay_naming_it_and_leaves_the_bucket(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = await store_histories(bus, seed=7, histories=12)
    await bus.runs.put("ns-0.kept", b"{}")
    real_add = ProjectionFold.add

    def dying_add(fold: ProjectionFold, event: Envelope, traceparent: str = "") -> None:
        if event.namespace == "ns-3":
            os._exit(7)  # the worker holding ns-3's runs dies mid-fold (the OOM killer, say)
        real_add(fold, event)

    monkeypatch.setattr(ProjectionFold, "add", dying_add)  # the workers fork with it
    # small batches: more are dealt to the worker after it died
    monkeypatch.setattr(replay_module, "read_messages", partial(read_messages, batch=3))

    with pytest.raises(
        PlntError,
        match=r"fold worker plnt-replay-\d ended without its result "
        r"\(exit code 7\); the bucket was left as it was",
    ):
        await replay(bus, workers=2)

    assert await bucket(bus, {"ns-0.kept", *fold_one_by_one(events)[0]}) == {
        "ns-0.kept": (b"{}", 1)
    }
    assert multiprocessing.active_children() == []


async def test_a_worker_that_fails_fails_the_replay_with_its_error(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store_histories(bus, seed=8, histories=4)

    def failing_add(fold: ProjectionFold, event: Envelope, traceparent: str = "") -> None:
        raise RuntimeError("a bug in the fold")

    async def reading_slowly(nc: object) -> AsyncIterator[list[tuple[str, bytes]]]:
        async for batch in read_messages(bus.nc, batch=3):
            yield batch
            await asyncio.sleep(0.05)  # the failed worker has exited when the stream ends

    monkeypatch.setattr(ProjectionFold, "add", failing_add)
    monkeypatch.setattr(replay_module, "read_messages", reading_slowly)

    with pytest.raises(PlntError, match=r"failed: RuntimeError\('a bug in the fold'\)"):
        await replay(bus, workers=2)
    assert multiprocessing.active_children() == []


async def test_a_read_that_fails_midway_ends_every_worker_and_writes_nothing(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store_histories(bus, seed=9, histories=6)
    # the workers are busy with the first batch when the read fails: they are killed
    monkeypatch.setattr(ProjectionFold, "add", lambda fold, event: time.sleep(60))

    async def first_batch_then_gone(nc: object) -> AsyncIterator[list[tuple[str, bytes]]]:
        async for batch in read_messages(bus.nc, batch=5):
            yield batch
            raise BusUnavailable("reading PLNT_EVENTS: no answer in 10.0s")

    monkeypatch.setattr(replay_module, "read_messages", first_batch_then_gone)

    started = time.perf_counter()
    with pytest.raises(BusUnavailable):
        await replay(bus, workers=2)
    assert multiprocessing.active_children() == []
    assert time.perf_counter() - started < 5  # the busy workers killed, not waited for
    assert await kv_snapshot(bus.nc, subjects.RUNS_BUCKET) == {}


@pytest.mark.parametrize(("cores", "workers"), [({0}, 1), ({0, 1}, 2), (set(range(16)), 4)])
def test_one_worker_per_core_the_process_may_use_up_to_four(
    monkeypatch: pytest.MonkeyPatch, cores: set[int], workers: int
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: cores)
    assert replay_workers.worker_count() == workers


@pytest.mark.parametrize(("cpus", "workers"), [(3, 3), (None, 1)])
def test_without_an_affinity_call_the_cpu_count_says_and_an_unknown_one_gives_one(
    monkeypatch: pytest.MonkeyPatch, cpus: int | None, workers: int
) -> None:
    monkeypatch.delattr(os, "sched_getaffinity")  # macOS and Windows have none
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    assert replay_workers.worker_count() == workers


def test_a_message_is_dealt_by_its_runs_namespace_and_name_whatever_its_type() -> None:
    subject = subjects.event_subject(EventType.RUN_REQUESTED, "team-a", "review-responder")
    assert replay_workers._run_of(subject) == "team-a.review-responder"
    assert replay_workers._run_of(
        subjects.event_subject(EventType.ANALYSIS_PASSED, "team-a", "review-responder")
    ) == replay_workers._run_of(subject)


async def test_a_worker_whose_parent_vanished_exits_quietly(
    capfd: pytest.CaptureFixture[str],
) -> None:
    workers = replay_workers.FoldWorkers(1)
    (worker,) = workers._workers
    worker.pipe.close()  # as when the parent is killed: the worker reads the end of its pipe
    worker.process.join(10)
    assert worker.process.exitcode == 0
    assert "Traceback" not in capfd.readouterr().err
    workers.close()


async def test_ctrl_c_ends_a_worker_at_once() -> None:
    workers = replay_workers.FoldWorkers(1)
    (worker,) = workers._workers
    try:
        os.kill(worker.process.pid or 0, signal.SIGINT)  # at once: before it could set itself up
        worker.process.join(10)
        assert worker.process.exitcode == -signal.SIGINT  # the default action, not a handler
    finally:
        workers.close()
