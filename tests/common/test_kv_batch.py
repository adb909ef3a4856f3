"""Atomic batch KV writes against a real nats-server (2.12+ feature)."""

from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client
from nats.js import api
from nats.js.errors import KeyNotFoundError

from plnt_common import subjects
from plnt_common.bus import kv_batch
from plnt_common.bus.bus import Bus
from plnt_common.bus.kv_batch import MAX_BATCH, allows_atomic, bucket_stream, purge_all, put_all
from plnt_common.bus.provision import ensure_jetstream
from plnt_common.errors import BusUnavailable
from plnt_common.nats_server import NatsServer
from plnt_testkit.tcp_proxy import FaultProxy


@pytest.fixture
async def proxy(nats_server: NatsServer) -> AsyncIterator[FaultProxy]:
    """A proxy in front of the test's nats-server that can hold the server's answers."""
    async with FaultProxy("127.0.0.1", nats_server.port) as started:
        yield started


@pytest.fixture
async def proxied(bus: Bus, proxy: FaultProxy) -> AsyncIterator[Client]:
    """A client of the provisioned server, through ``proxy``."""
    client = await nats.connect(f"nats://127.0.0.1:{proxy.port}", allow_reconnect=False)
    yield client
    proxy.mode = "pass"
    await client.close()


async def test_the_projection_bucket_takes_atomic_batches_and_others_do_not(bus: Bus) -> None:
    assert await allows_atomic(bus.nc, subjects.RUNS_BUCKET)
    assert not await allows_atomic(bus.nc, subjects.ROUTES_BUCKET)
    assert not await allows_atomic(bus.nc, "no-such-bucket")


async def test_every_key_is_stored_once_whatever_the_batch_size(bus: Bus) -> None:
    stream = bucket_stream(subjects.RUNS_BUCKET)
    before = (await bus.js.stream_info(stream)).state.last_seq
    items = {f"once.k{i}": f"value {i}".encode() for i in range(5)}
    await put_all(bus.nc, subjects.RUNS_BUCKET, items, batch_size=2)
    assert (await bus.js.stream_info(stream)).state.last_seq == before + len(items)
    for key, value in items.items():
        assert (await bus.runs.get(key)).value == value


async def test_a_commit_answered_late_but_within_its_timeout_is_stored(
    bus: Bus, proxy: FaultProxy, proxied: Client
) -> None:
    proxy.mode, proxy.delay_s = "slow", 1.0
    await put_all(proxied, subjects.RUNS_BUCKET, {"late.a": b"1", "late.b": b"2"})
    assert (await bus.runs.get("late.b")).value == b"2"


async def test_a_commit_left_unanswered_fails_naming_the_bucket(
    bus: Bus, proxy: FaultProxy, proxied: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kv_batch, "COMMIT_TIMEOUT_S", 0.5)
    proxy.mode, proxy.delay_s = "slow", 2.0
    with pytest.raises(
        BusUnavailable, match=rf"batch write to bucket {subjects.RUNS_BUCKET} failed: TimeoutError"
    ):
        await put_all(proxied, subjects.RUNS_BUCKET, {"unanswered.a": b"1", "unanswered.b": b"2"})


async def test_purging_removes_exactly_the_keys_given(bus: Bus) -> None:
    for key in ("purge.a", "purge.b", "purge.kept"):
        await bus.runs.put(key, b"x")
    await purge_all(bus.nc, subjects.RUNS_BUCKET, ["purge.a", "purge.b"])
    for key in ("purge.a", "purge.b"):
        with pytest.raises(KeyNotFoundError):
            await bus.runs.get(key)
    assert (await bus.runs.get("purge.kept")).value == b"x"


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
