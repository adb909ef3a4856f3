"""The CLI called in-process (``plnt_cli.main.main``) against a real nats-server."""

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from plnt_common.nats_server import NatsServer, free_port


@pytest.fixture(scope="module")
def bus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A JetStream server of its own for the module; no saga services run on it."""
    server = NatsServer(store_dir=tmp_path_factory.mktemp("nats"), port=free_port()).start()
    yield server.url
    server.stop(kill=True)


@pytest.fixture(autouse=True)
def no_running_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither a real ``plnt up`` nor PLNT_NATS_URL of the machine leaks into a test."""
    monkeypatch.setenv("PLNT_HOME", str(tmp_path / "plnt-home"))
    monkeypatch.delenv("PLNT_NATS_URL", raising=False)


@pytest.fixture(autouse=True)
def process_logging_left_alone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """main() configures logging for a whole ``plnt`` process: warnings only, cached loggers
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
