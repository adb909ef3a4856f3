"""Fixtures shared by every test tier: a real nats-server per test, started from the wheel."""

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from plnt_common.bus import connect
from plnt_common.nats_server import NatsServer, free_port


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A fresh JetStream server with its own store; killed after the test."""
    server = NatsServer(store_dir=tmp_path / "nats", port=free_port()).start()
    yield server
    server.stop(kill=True)


@pytest.fixture
def nats_url(nats_server: NatsServer) -> str:
    return nats_server.url


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[Client]:
    client = await connect(nats_url, name="test")
    yield client
    await client.close()
