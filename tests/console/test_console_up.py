"""``plnt up`` gives the console a port, and ``plnt serve console`` refuses an open address."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from plnt_cli import up


def test_up_gives_the_console_another_port_when_its_default_is_taken_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        monkeypatch.setattr(up, "DEFAULT_CONSOLE_PORT", taken)
        said: list[str] = []
        config = up.stack_config(
            data_dir=tmp_path, nats_port=None, router_port=None, replicas=1, say=said.append
        )
    assert config.console_port not in (0, taken, config.nats_port, config.router_port)
    assert f"port {taken} is taken, so the console listens on {config.console_port}" in said
    assert config.console_url == f"http://127.0.0.1:{config.console_port}/"


def test_serve_console_refuses_a_non_loopback_address_without_a_token_in_one_line() -> None:
    env = {**os.environ, "PLNT_CONSOLE_HOST": "0.0.0.0", "PLNT_NATS_URL": "nats://127.0.0.1:1"}
    env.pop("PLNT_CONSOLE_TOKEN", None)
    done = subprocess.run(
        [sys.executable, "-m", "plnt_cli", "serve", "console"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "plnt: the console refuses to listen on 0.0.0.0 without a token: "
        "set PLNT_CONSOLE_TOKEN (or listen on 127.0.0.1)"
    ]
