"""/healthz, /readyz and /metrics on a service's metrics port: answered by its event loop,
ready only while its bus is connected and its consumer bound. Real processes, a real
nats-server killed and restarted under them."""

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from plnt_common import health
from plnt_common.nats_server import NatsServer, free_port


def status_of(url: str, timeout_s: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0


def wait_status(url: str, wanted: int, *, within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    last = None
    while time.monotonic() < deadline:
        last = status_of(url)
        if last == wanted:
            return
        time.sleep(0.1)
    raise AssertionError(f"{what}: {url} answered {last}, not {wanted}, within {within_s}s")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[NatsServer, str]]:
    """A puller process with its metrics port, and the nats-server it uses."""
    server = NatsServer(store_dir=tmp_path / "nats", port=free_port()).start()
    port = free_port()
    env = dict(os.environ, PLNT_NATS_URL=server.url, PLNT_PULLER_METRICS_PORT=str(port))
    with (tmp_path / "puller.log").open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "plnt_cli", "serve", "puller"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield server, f"http://127.0.0.1:{port}"
    finally:
        process.kill()
        process.wait()
        server.stop(kill=True)


def test_a_service_is_ready_only_while_its_bus_is_up(
    served: tuple[NatsServer, str], tmp_path: Path
) -> None:
    server, base = served
    wait_status(f"{base}/readyz", 200, within_s=30, what="a started puller")
    assert status_of(f"{base}/healthz") == 200
    with urllib.request.urlopen(f"{base}/metrics", timeout=2) as response:
        assert b"plnt_" in response.read()

    server.stop(kill=True)
    wait_status(f"{base}/readyz", 503, within_s=15, what="a puller whose NATS went away")
    assert status_of(f"{base}/healthz") == 200  # alive: restarting it would not help

    server.start()
    wait_status(f"{base}/readyz", 200, within_s=30, what="a puller whose NATS came back")


async def test_healthz_goes_unanswered_while_the_event_loop_is_blocked() -> None:
    port = free_port()
    runner = await health.serve_probes(port, host="127.0.0.1")
    url = f"http://127.0.0.1:{port}/healthz"
    try:
        assert await asyncio.to_thread(status_of, url) == 200
        answers: list[int] = []
        asking = threading.Thread(target=lambda: answers.append(status_of(url, 1.0)))
        # the loop blocked (as by a handler that never yields) until the probe gave up
        asking.start()
        asking.join(5.0)
        assert answers == [0], "/healthz answered from a blocked event loop"
    finally:
        with contextlib.suppress(Exception):
            await runner.cleanup()


def test_readiness_names_an_unbound_consumer() -> None:
    health.consumer_bound("plnt-test", False)
    try:
        ready, reason = health.readiness()
        assert not ready
    finally:
        health.consumer_bound("plnt-test", True)
    assert "not connected" in reason or "plnt-test" in reason
