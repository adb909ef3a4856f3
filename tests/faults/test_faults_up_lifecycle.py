"""``plnt up`` starts and stops cleanly at any moment, and a service told to stop exits
promptly whether or not it ever reached NATS."""

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest

from plnt_common import subjects
from plnt_common.bus.connection import connect
from plnt_common.nats_server import NatsServer, free_port, free_ports
from plnt_testkit.terminal import sigint_default

MARK = "PLNT_TEST_PROCESS_MARK"
"""An environment variable every process ``plnt up`` starts inherits: found by it in /proc."""


STOPPED_WITHIN_S = 10.0
"""Every service's stop, run in parallel, on a busy machine. A started console stops in about
0.2 s (its runs watch ends at once when cancelled, with or without the server); the margin
is for eight interpreters still importing on two busy cores when the signal comes."""


def marked_pids(mark: str) -> list[int]:
    """Live processes whose environment carries ``MARK=mark`` (zombies are gone already)."""
    found = []
    needle = f"{MARK}={mark}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def spawn_up(tmp_path: Path, mark: str, *extra: str) -> "subprocess.Popen[str]":
    nats_port, router_port = free_ports(2)
    env = dict(os.environ, PLNT_HOME=str(tmp_path / "home"), **{MARK: mark})
    env.pop("PLNT_NATS_URL", None)
    argv = [sys.executable, "-m", "plnt_cli", "up", "--data-dir", str(tmp_path / "data")]
    argv += ["--nats-port", str(nats_port), "--router-port", str(router_port), *extra]
    # its own process group, as a shell gives a foreground job: a Ctrl-C reaches the group
    return subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=sigint_default,
    )


async def wait_for_durable(url: str, service: str) -> None:
    nc = await connect(url, name="test")
    try:
        while True:
            try:
                await nc.jetstream().consumer_info(subjects.STREAM, subjects.durable_name(service))
                return
            except Exception:  # not provisioned or not bound yet
                await asyncio.sleep(0.1)
    finally:
        await nc.close()


def wait_until_gone(mark: str, *, timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := marked_pids(mark)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.parametrize("after_s", [0.2, 0.8, 1.5, 3.0], ids=lambda s: f"{s}s")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_start_up_stops_everything_and_leaves_no_pointer(
    tmp_path: Path, after_s: float, signum: int
) -> None:
    mark = uuid.uuid4().hex
    up = spawn_up(tmp_path, mark)
    time.sleep(after_s)
    if signum == signal.SIGINT:
        os.killpg(up.pid, signum)  # Ctrl-C in a terminal: every process of the group
    else:
        up.send_signal(signum)  # a service manager's stop: plnt up alone
    signalled = time.monotonic()
    output, _ = up.communicate(timeout=30)
    # well inside the 10 s after which plnt up SIGKILLs a service that ignores SIGTERM
    assert time.monotonic() - signalled < STOPPED_WITHIN_S, output
    left = wait_until_gone(mark, timeout_s=5)
    assert left == [], f"left running: {left}\n{output}"
    assert not (tmp_path / "home" / "up.json").exists(), output
    assert "plnt: unexpected" not in output, output
    if after_s >= 0.8:  # earlier, the interpreter itself may be starting and say so
        assert "Traceback" not in output, output


SIGNAL_STORM = """
import os, signal, sys, threading, time
from plnt_cli.up import StopFlag
flag = StopFlag()
signal.signal(signal.SIGUSR1, lambda signum, frame: flag.set())
done = threading.Event()
def pelt():
    while not done.is_set():
        os.kill(os.getpid(), signal.SIGUSR1)
threading.Thread(target=pelt, daemon=True).start()
end = time.monotonic() + 2
while time.monotonic() < end:
    flag.set()
    flag.wait(0)
done.set()
print("still running")
"""


def test_the_stop_flag_survives_signals_landing_inside_its_own_handler() -> None:
    # plnt up's signal handler sets the flag its main thread waits on; with a lock inside
    # (a threading.Event), a signal landing while the handler of the last one holds it
    # wedged plnt up for good (seen: plnt up deaf to every later SIGTERM)
    storm = subprocess.run(
        [sys.executable, "-c", SIGNAL_STORM], capture_output=True, text=True, timeout=30
    )
    assert (storm.returncode, storm.stdout.strip()) == (0, "still running"), storm.stderr[-800:]


def test_a_service_waiting_for_an_unreachable_nats_exits_soon_after_sigterm() -> None:
    env = dict(os.environ, PLNT_NATS_URL=f"nats://127.0.0.1:{free_port()}")
    watcher = subprocess.Popen(
        [sys.executable, "-m", "plnt_cli", "serve", "watcher"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert watcher.stdout is not None
    for line in watcher.stdout:  # until it is retrying the connection
        if '"nats.error"' in line:
            break
    sent = time.monotonic()
    watcher.send_signal(signal.SIGTERM)
    output, _ = watcher.communicate(timeout=10)
    assert time.monotonic() - sent < 2.0, output
    assert watcher.returncode == 0, output
    assert '"service.stopped"' in output


def _log_times(output: str) -> dict[str, float]:
    """Each logged event's last time, in seconds, from a service's JSON log lines."""
    times = {}
    for line in output.splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict) and "timestamp" in entry:
                stamp = datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00"))
                times[entry["event"]] = stamp.timestamp()
    return times


def test_a_service_whose_nats_went_away_exits_soon_after_sigterm(tmp_path: Path) -> None:
    server = NatsServer(store_dir=tmp_path / "nats", port=free_port()).start()
    watcher = subprocess.Popen(
        [sys.executable, "-m", "plnt_cli", "serve", "watcher"],
        env=dict(os.environ, PLNT_NATS_URL=server.url),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        asyncio.run(wait_for_durable(server.url, "watcher"))  # connected and consuming
        server.stop(kill=True)
        time.sleep(1.0)
        sent = time.monotonic()
        watcher.send_signal(signal.SIGTERM)
        output, _ = watcher.communicate(timeout=15)
        # the stop itself, by the service's own clock: before, each consumer waited out a
        # request timeout (5 s) against the dead server. The process's exit after it is
        # the interpreter's teardown, seconds on a machine with every core busy.
        stopping = _log_times(output)
        assert stopping["service.stopped"] - stopping["service.cancelling"] < 2.0, output
        assert time.monotonic() - sent < 10.0, output
        assert watcher.returncode == 0, output
    finally:
        watcher.kill()
        server.stop(kill=True)


@pytest.mark.parametrize(
    ("variable", "value", "service"),
    [
        ("PLNT_NATS_REPLICAS", "three", "watcher"),
        ("PLNT_NATS_REPLICAS", "9", "puller"),
        ("PLNT_WATCHER_CONCURRENCY", "abc", "watcher"),
    ],
    ids=["replicas-not-a-number", "replicas-too-many", "prefixed-setting"],
)
def test_a_setting_a_service_refuses_is_one_line_naming_the_variable(
    variable: str, value: str, service: str
) -> None:
    served = subprocess.run(
        [sys.executable, "-m", "plnt_cli", "serve", service],
        env=dict(os.environ, **{variable: value}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert served.returncode == 1
    lines = served.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"plnt: setting {variable}: "), lines
    assert repr(value) in lines[0]
