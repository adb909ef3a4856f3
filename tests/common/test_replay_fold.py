"""Replay's fold in a forked child: a child that fails or dies, and a read that fails."""

import multiprocessing
import os
import random
import time
from collections.abc import AsyncGenerator
from functools import partial

import pytest
from test_bus_replay import bucket, store_histories
from test_projection import fold_one_by_one, random_history

from plnt_common.bus import replay as replay_module
from plnt_common.bus import replay_fold
from plnt_common.bus.bus import Bus
from plnt_common.bus.history import read_payloads
from plnt_common.bus.replay import replay
from plnt_common.bus.replay_fold import FoldFailed
from plnt_common.errors import BusUnavailable
from plnt_common.projection import ProjectionFold

KEPT = b'{"kept": true}'


async def kept_key(bus: Bus) -> tuple[bytes, int]:
    """A key replay would purge: it must still be there when replay fails."""
    await bus.runs.put("ns-gone.old", KEPT)
    return (await bucket(bus, {"ns-gone.old"}))["ns-gone.old"]


async def test_a_fold_that_fails_in_the_child_is_raised_and_touches_no_key(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store_histories(bus, seed=7, histories=3)
    before = await kept_key(bus)

    def failing(fold: ProjectionFold, payloads: list[bytes]) -> None:
        raise RuntimeError("the fold broke")

    monkeypatch.setattr(replay_fold, "fold_payloads", failing)  # the child is forked with it
    # many small batches: the child is gone while batches are still being handed over
    monkeypatch.setattr(replay_module, "read_payloads", partial(read_payloads, batch=2))
    with pytest.raises(FoldFailed, match="RuntimeError: the fold broke"):
        await replay(bus, fork=True)
    assert await bucket(bus, {"ns-gone.old"}) == {"ns-gone.old": before}
    assert multiprocessing.active_children() == []


async def test_a_child_that_dies_is_one_error_with_its_exit_code(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store_histories(bus, seed=8, histories=3)
    before = await kept_key(bus)

    def dying(fold: ProjectionFold, payloads: list[bytes]) -> None:
        os._exit(3)

    monkeypatch.setattr(replay_fold, "fold_payloads", dying)
    with pytest.raises(FoldFailed, match=r"ended without an answer \(exit code 3\)"):
        await replay(bus, fork=True)
    assert await bucket(bus, {"ns-gone.old"}) == {"ns-gone.old": before}
    assert multiprocessing.active_children() == []


async def test_a_read_that_fails_is_the_error_raised_and_the_child_ends_quietly(
    bus: Bus, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    await store_histories(bus, seed=9, histories=3)
    before = await kept_key(bus)

    async def failing_read(nc: object) -> AsyncGenerator[list[bytes], None]:
        async for batch in read_payloads(bus.nc):
            yield batch
        raise BusUnavailable("the server went away mid-read")

    monkeypatch.setattr(replay_module, "read_payloads", failing_read)
    started = time.perf_counter()
    with pytest.raises(BusUnavailable, match="went away mid-read"):
        await replay(bus, fork=True)
    assert time.perf_counter() - started < 3  # the child ended when told, not killed late
    assert await bucket(bus, {"ns-gone.old"}) == {"ns-gone.old": before}
    assert multiprocessing.active_children() == []
    assert "Traceback" not in capfd.readouterr().err  # the child said nothing of its own


def test_the_child_folds_each_batch_until_told_and_answers_the_projections() -> None:
    rng = random.Random(10)
    events = [e for ns in ("ns-0", "ns-1") for e in random_history(rng, namespace=ns)]
    payloads = [e.model_dump_json().encode() for e in events]
    expected, _ = fold_one_by_one(events)
    ours, theirs = multiprocessing.Pipe()
    inherited, _ = multiprocessing.Pipe()
    for batch in (payloads[:3], [b"{poison"], payloads[3:], None):
        ours.send(batch)

    replay_fold._fold_received(theirs, inherited)  # what the forked child runs

    assert ours.recv() == {key: p.model_dump_json().encode() for key, p in expected.items()}
    assert theirs.closed and inherited.closed


def test_the_child_answers_a_failure_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(fold: ProjectionFold, payloads: list[bytes]) -> None:
        raise RuntimeError("the fold broke")

    monkeypatch.setattr(replay_fold, "fold_payloads", failing)
    ours, theirs = multiprocessing.Pipe()
    inherited, _ = multiprocessing.Pipe()
    ours.send([b"{}"])

    replay_fold._fold_received(theirs, inherited)

    answer = ours.recv()
    assert isinstance(answer, FoldFailed)
    assert str(answer) == "replay's fold failed: RuntimeError: the fold broke"


def test_the_child_ends_quietly_when_the_parent_closed_the_pipe() -> None:
    ours, theirs = multiprocessing.Pipe()
    inherited, _ = multiprocessing.Pipe()
    ours.close()  # the parent's read failed

    replay_fold._fold_received(theirs, inherited)  # raises nothing

    assert theirs.closed
