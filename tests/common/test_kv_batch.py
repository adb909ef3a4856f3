"""Atomic batch KV writes against a real nats-server (2.12+ feature)."""

import pytest
from nats.js import api
from nats.js.errors import KeyNotFoundError

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.kv_batch import MAX_BATCH, allows_atomic, bucket_stream, put_all
from plnt_common.bus.provision import ensure_jetstream
from plnt_common.errors import BusUnavailable


async def test_the_projection_bucket_takes_atomic_batches_and_others_do_not(bus: Bus) -> None:
    assert await allows_atomic(bus.nc, subjects.RUNS_BUCKET)
    assert not await allows_atomic(bus.nc, subjects.ROUTES_BUCKET)


async def test_more_keys_than_one_batch_are_all_written(bus: Bus) -> None:
    items = {f"batch.k{i}": f"value {i}".encode() for i in range(MAX_BATCH + 250)}
    await put_all(bus.nc, subjects.RUNS_BUCKET, items)
    for key in ("batch.k0", f"batch.k{MAX_BATCH - 1}", f"batch.k{MAX_BATCH + 249}"):
        assert (await bus.runs.get(key)).value == items[key]
    for key in items:
        await bus.runs.purge(key)


async def test_a_bucket_without_atomic_batches_is_written_key_by_key(bus: Bus) -> None:
    items = {f"fallback.k{i}": b"routed" for i in range(20)}
    await put_all(bus.nc, subjects.ROUTES_BUCKET, items)
    assert (await bus.routes.get("fallback.k19")).value == b"routed"
    for key in items:
        await bus.routes.purge(key)


async def test_a_batch_the_server_refuses_is_an_error_and_stores_nothing(bus: Bus) -> None:
    too_many = {f"refused.k{i}": b"x" for i in range(MAX_BATCH + 1)}
    with pytest.raises(BusUnavailable, match="not stored"):
        await put_all(bus.nc, subjects.RUNS_BUCKET, too_many, batch_size=MAX_BATCH + 1)
    with pytest.raises(KeyNotFoundError):
        await bus.runs.get("refused.k0")


async def test_provisioning_turns_atomic_batches_on_for_a_bucket_made_without(
    bus: Bus,
) -> None:
    stream = bucket_stream(subjects.RUNS_BUCKET)
    config = (await bus.js.stream_info(stream)).config
    config.allow_atomic = False
    await bus.js.update_stream(config)
    assert not await allows_atomic(bus.nc, subjects.RUNS_BUCKET)
    await ensure_jetstream(bus.js)
    info = await bus.js.stream_info(stream)
    assert info.config.allow_atomic
    assert info.config.storage == api.StorageType.FILE
