"""Runner processes: spawn, check, signal and stop them, and ``stop_all_runners`` for ``plnt up``.

Runners start in their own session (``start_new_session=True``): a Ctrl-C sent to the
terminal's process group reaches ``plnt up`` and its services, not the runners, and the
local-backend can restart without taking them down. Each runner therefore leads its own
process group, which is what makes signalling safe: signals go to the group ``pid``
(``killpg``), so a pid file whose pid was reused by an unrelated, non-leader process
signals nothing. This module does what it is told; whether to stop or adopt is decided
in ``logic``.
"""

import asyncio
import collections
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from plnt_common.errors import InstallFailed
from plnt_common.logs import get_logger
from plnt_local_backend.adapters.release_dir import backend_dirs, read_pid_file, release_dirs

log = get_logger(__name__)

RUNNER_HOST = "127.0.0.1"
"""Runners of the embedded mode listen on loopback only."""

KILL_WAIT_S = 5.0
"""After SIGKILL, how long to wait for the process to disappear before giving up on it."""

_POLL_S = 0.05

_handed_out: collections.deque[int] = collections.deque(maxlen=4096)
"""Ports given to runners lately: one whose runner has not bound it yet looks free, and
was seen given to a second runner, whose health probe then reached the first one."""


def pick_free_port(host: str = RUNNER_HOST, *, preferred: int | None = None) -> int:
    """A port nothing listens on right now: ``preferred`` when it is free, else any.

    Another process may take it before the runner binds; the runner then exits and is
    restarted on a new port, like any other failed start.
    """
    if preferred is not None:
        # Bound as the runner binds (SO_REUSEADDR: a killed runner's TIME_WAIT connections
        # do not hold the port; a listener does).
        with socket.socket() as sock, contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, preferred))
            return preferred
    while True:
        with socket.socket() as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port not in _handed_out:
            _handed_out.append(port)
            return port


def pid_alive(pid: int, *, reap: bool = False) -> bool:
    """True when ``pid`` exists and is not a zombie.

    ``reap`` collects the exit status first when ``pid`` happens to be our child without a
    ``Popen`` watching it (a runner adopted inside the process that started it, as tests
    do); never pass it for a child a ``Popen`` owns, that would steal its exit status.
    """
    if pid <= 0:
        return False
    if reap:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return not _is_zombie(pid)


def is_group_leader(pid: int) -> bool:
    """True when ``pid`` leads its own process group, as every runner we start does."""
    try:
        return os.getpgid(pid) == pid
    except (ProcessLookupError, PermissionError):
        return False


def signal_group(pid: int, signum: int) -> bool:
    """Send ``signum`` to the process group ``pid``; False when no such group is ours."""
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


class RunnerProcess:
    """One runner process: started here (``spawn_runner``) or adopted by pid (``adopt``)."""

    def __init__(self, *, pid: int, popen: subprocess.Popen[bytes] | None = None) -> None:
        self.pid = pid
        self._popen = popen

    @classmethod
    def adopt(cls, pid: int) -> "RunnerProcess":
        """A runner started by an earlier local-backend; only its pid is known."""
        return cls(pid=pid)

    def running(self) -> bool:
        if self._popen is not None:
            return self._popen.poll() is None
        return pid_alive(self.pid, reap=True)

    def exit_description(self) -> str:
        """How the process ended, as far as it can be known ("exited" for adopted ones)."""
        code = self._popen.returncode if self._popen is not None else None
        if code is None:
            return "runner exited"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"runner was killed by {name}"
        return f"runner exited with code {code}"

    async def stop(self, *, grace_s: float) -> None:
        """SIGTERM the runner's group, SIGKILL it after ``grace_s``; returns once it is gone.

        Gives up with a warning when even SIGKILL does not remove the process within
        ``KILL_WAIT_S`` (e.g. a zombie whose parent does not reap it).
        """
        if not self.running():
            return
        signal_group(self.pid, signal.SIGTERM)
        if await self._wait_gone(grace_s):
            return
        log.warning("runner.sigkill", pid=self.pid, grace_s=grace_s)
        signal_group(self.pid, signal.SIGKILL)
        if not await self._wait_gone(KILL_WAIT_S):
            log.error("runner.unkillable", pid=self.pid)

    async def _wait_gone(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.running():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_POLL_S)
        return True


def spawn_runner(
    *, command: Sequence[str], env: Mapping[str, str], cwd: Path, log_file: Path
) -> RunnerProcess:
    """Start ``command`` in its own session, stdout and stderr appended to ``log_file``.

    Raises ``InstallFailed`` naming the command when it cannot be executed at all.
    """
    cwd.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log_stream:
        try:
            popen = subprocess.Popen(
                list(command),
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log_stream,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise InstallFailed(
                f"cannot start runner command {command[0]!r}: {exc.strerror or exc}"
            ) from None
    return RunnerProcess(pid=popen.pid, popen=popen)


async def wait_until_gone(pid: int, *, poll_s: float = 0.5) -> None:
    """Return once ``pid`` no longer exists (the owner of the embedded stack died)."""
    # A pid that is not our child cannot be awaited: there is no event to wait on, so poll.
    while pid_alive(pid):  # noqa: ASYNC110
        await asyncio.sleep(poll_s)


def stop_all_runners(
    data_dir: Path, *, grace_s: float = 10.0, every_backend: bool = True
) -> list[int]:
    """Stop every runner that has a pid file under ``data_dir`` and, with ``every_backend``,
    under each backend's own ``<data_dir>/<backend>/``; returns the pids signalled.

    Blocking (call it with ``asyncio.to_thread`` from async code). For ``plnt up`` at the
    very end of its shutdown, after the local-backend exited: the local-backend leaves
    runners alive on SIGTERM so that a restart adopts them, and would restart runners
    stopped while it still runs. SIGTERM to each runner's process group, SIGKILL to those
    still there after ``grace_s``; pid files of runners that are gone are removed, the
    rest of each release directory (logs) is kept.
    """
    roots = [data_dir, *(backend_dirs(data_dir) if every_backend else [])]
    found = [d for root in roots for d in release_dirs(root)]
    pid_files = {d.pid_file: read_pid_file(d.pid_file) for d in found}
    signalled = {
        path: pid
        for path, pid in pid_files.items()
        if pid is not None and signal_group(pid, signal.SIGTERM)
    }
    _wait_all_gone(signalled.values(), timeout_s=grace_s)
    for pid in signalled.values():
        if pid_alive(pid, reap=True) and signal_group(pid, signal.SIGKILL):
            log.warning("runner.sigkill", pid=pid, grace_s=grace_s)
    _wait_all_gone(signalled.values(), timeout_s=KILL_WAIT_S)
    for path, recorded in pid_files.items():
        if recorded is None or not pid_alive(recorded, reap=True):
            path.unlink(missing_ok=True)
    return sorted(signalled.values())


def _wait_all_gone(pids: Iterable[int], *, timeout_s: float) -> None:
    remaining = set(pids)
    deadline = time.monotonic() + timeout_s
    while remaining and time.monotonic() < deadline:
        remaining = {pid for pid in remaining if pid_alive(pid, reap=True)}
        if remaining:
            time.sleep(_POLL_S)


def _is_zombie(pid: int) -> bool:
    """Linux only (``/proc``); elsewhere a zombie counts as alive until its parent reaps it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # The command name in parentheses may contain spaces; the state follows the last ")".
    return stat.rpartition(")")[2].split()[:1] == ["Z"]
