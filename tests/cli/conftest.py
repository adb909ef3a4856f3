"""The CLI called in-process (``plnt_cli.main.main``) against a real nats-server."""

from collections.abc import Iterator
from pathlib import Path

import pytest

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
