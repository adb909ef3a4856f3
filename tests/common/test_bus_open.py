"""Opening the bus on a real nats-server: its name, waiting for the server, reconnects, replicas."""

import asyncio
from pathlib import Path

import pytest

from plnt_common.bus.bus import Bus
from plnt_common.errors import BusUnavailable
from plnt_common.nats_server import NatsServer, free_ports
from plnt_testkit.monitored_nats import MonitoredNatsServer


async def test_the_server_shows_the_bus_under_its_service_name(
    monitored_server: MonitoredNatsServer,
) -> None:
    bus = await Bus.open(monitored_server.url, service="watcher")
    names = await asyncio.to_thread(monitored_server.connection_names)
    assert names == ["plnt-watcher"]
    await bus.close()


async def test_a_bus_waiting_for_the_server_opens_once_it_listens(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    server = NatsServer(store_dir=tmp_path / "nats", port=port)
    opening = asyncio.create_task(Bus.open(server.url, service="test", wait_for_server=True))
    await asyncio.sleep(2.5)  # longer than a CLI's few connection attempts take to fail
    assert not opening.done()
    server.start()
    try:
        bus = await asyncio.wait_for(opening, timeout=20)
        assert bus.nc.is_connected
        await bus.close()
    finally:
        server.stop(kill=True)


async def test_a_bus_wakes_its_reconnect_waiters_when_the_server_is_back(
    nats_server: NatsServer,
) -> None:
    bus = await Bus.open(nats_server.url, service="test", wait_for_server=True)
    reconnected = asyncio.create_task(bus.reconnects.next())
    nats_server.stop(kill=True)
    await asyncio.sleep(0.3)
    assert not reconnected.done()
    nats_server.start()
    await asyncio.wait_for(reconnected, timeout=20)
    assert bus.reconnects.count == 1
    await bus.close()


async def test_a_bus_refuses_to_open_with_more_replicas_than_the_servers_hold(
    nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLNT_NATS_REPLICAS", "3")
    with pytest.raises(BusUnavailable, match=r"cannot keep 3 replicas \(PLNT_NATS_REPLICAS\)"):
        await Bus.open(nats_url, service="test")


async def test_a_bus_not_told_to_wait_fails_at_once_naming_the_url() -> None:
    (port,) = free_ports(1)  # nothing listens there
    with pytest.raises(BusUnavailable, match=rf"cannot reach NATS at nats://127\.0\.0\.1:{port}"):
        await asyncio.wait_for(Bus.open(f"nats://127.0.0.1:{port}", service="cli"), timeout=10)
