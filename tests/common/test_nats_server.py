"""The embedded nats-server: what its sync interval does and does not risk."""

import asyncio
from pathlib import Path

import pytest

from plnt_cli.supervisor import StackConfig, Supervisor
from plnt_common.bus import connect
from plnt_common.nats_server import (
    LOCAL_SYNC_INTERVAL,
    NatsServer,
    checked_sync_interval,
    free_port,
    free_ports,
)

MESSAGES = 2_000


async def publish_acknowledged(url: str, count: int) -> None:
    nc = await connect(url, name="test")
    js = nc.jetstream()
    await js.add_stream(name="DURABLE", subjects=["durable.>"])
    in_flight = asyncio.Semaphore(64)

    async def one(index: int) -> None:
        async with in_flight:
            await js.publish(f"durable.{index}", b"x" * 600)

    await asyncio.gather(*(one(index) for index in range(count)))
    await nc.close()


async def stored_messages(url: str) -> int:
    nc = await connect(url, name="test")
    info = await nc.jetstream().stream_info("DURABLE")
    await nc.close()
    return int(info.state.messages)


def test_a_kill_9_of_the_server_loses_nothing_acknowledged_between_fsyncs(
    nats_server: NatsServer,
) -> None:
    asyncio.run(publish_acknowledged(nats_server.url, MESSAGES))
    # at once, well inside one sync interval: nothing of it was fsynced on purpose
    nats_server.stop(kill=True)
    nats_server.start()
    assert asyncio.run(stored_messages(nats_server.url)) == MESSAGES


@pytest.mark.parametrize("interval", ["always", "500ms", LOCAL_SYNC_INTERVAL, "2m"])
def test_the_server_runs_with_each_interval_accepted(tmp_path: Path, interval: str) -> None:
    server = NatsServer(store_dir=tmp_path / "nats", port=free_port(), sync_interval=interval)
    server.start()
    try:
        assert f"sync_interval: {interval}" in (tmp_path / "nats" / "nats-server.conf").read_text()
        asyncio.run(publish_acknowledged(server.url, 10))
        assert asyncio.run(stored_messages(server.url)) == 10
    finally:
        server.stop(kill=True)


def test_plnt_up_runs_nats_with_the_interval_asked_for(tmp_path: Path) -> None:
    nats_port, router_port = free_ports(2)
    config = StackConfig(
        data_dir=tmp_path, nats_port=nats_port, router_port=router_port, nats_sync_interval="always"
    )
    supervisor = Supervisor(config, say=lambda _: None)
    supervisor.start_nats()
    try:
        assert "sync_interval: always" in (tmp_path / "nats" / "nats-server.conf").read_text()
    finally:
        supervisor.stop_nats(kill=True)


@pytest.mark.parametrize("interval", ["", "1", "0s", "1.5s", "-1s", "fast", "1s; rm"])
def test_an_interval_nats_server_would_not_take_is_refused_by_name(interval: str) -> None:
    with pytest.raises(ValueError, match=f"sync interval {interval!r} is not 'always'"):
        checked_sync_interval(interval)
