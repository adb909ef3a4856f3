"""A nats-server started from a configuration the test writes (auth, TLS, store limits):
what ``plnt_common.nats_server`` does not configure."""

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

from plnt_common.nats_server import free_port, nats_server_binary, wait_for_port


@contextlib.contextmanager
def configured_nats(directory: Path, settings: str) -> Iterator[str]:
    """A nats-server on a free loopback port with ``settings`` added; yields its URL."""
    port = free_port()
    config = directory / "nats-server.conf"
    config.write_text(f"host: 127.0.0.1\nport: {port}\n{settings}\n")
    process = subprocess.Popen(
        [nats_server_binary(), "-c", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        yield f"nats://127.0.0.1:{port}"
    finally:
        process.kill()
        process.wait()
