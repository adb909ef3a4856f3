"""Fixtures of the shared-library tests."""

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from plnt_common.bus.bus import Bus
from plnt_common.nats_server import free_ports
from plnt_testkit.monitored_nats import MonitoredNatsServer


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    """A provisioned bus on the test's own nats-server."""
    opened = await Bus.open(nats_url, service="test")
    yield opened
    await opened.close()


@pytest.fixture
def monitored_server(tmp_path: Path) -> Iterator[MonitoredNatsServer]:
    """A nats-server of the test's own that also serves ``/connz``."""
    port, monitor_port = free_ports(2)
    server = MonitoredNatsServer(store_dir=tmp_path / "nats", port=port, monitor_port=monitor_port)
    server.start()
    yield server
    server.stop(kill=True)
