"""Fixtures shared by every test tier: a real nats-server per test, started from the wheel."""

import logging
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import structlog
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


@pytest.fixture(autouse=True)
def process_logging_left_alone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CLI's main() (called in-process by the CLI and some end-to-end tests) configures
    logging for a whole ``plnt`` process: warnings only, cached loggers
    bound to stderr. In this test process that would bind every module's logger to a stream
    pytest closes later and hide info lines from the tests after this one, so the CLI gets
    the same level here, uncached and writing to whatever stderr is at the time."""

    def configure(**_: object) -> None:
        structlog.configure(
            wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
            logger_factory=lambda *_: structlog.PrintLogger(sys.stderr),
            cache_logger_on_first_use=False,
        )

    monkeypatch.setattr("plnt_cli.main.configure_logging", configure)
    yield
    structlog.reset_defaults()
