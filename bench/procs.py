"""Child processes of the benchmark: started pinned to one core, found by their start-up line.

Every server the harness starts (the fast backend, the router, a runner, the fake LLM)
prints ``listening on http://host:port`` on stdout once its socket listens; ``Child``
waits for that line in the child's log file and stops the process by its own pid at the
end. Pinning uses ``os.sched_setaffinity`` in the child before ``exec``, the same system
call as ``taskset -c N``. Nothing here measures anything.
"""

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from plnt_common.processes import die_with_parent, stop_process

SUT_CPU = 0
"""The core the system under test runs on (router, nginx, runner, executor)."""
LOAD_CPU = 1
"""The core the load runs on (wrk, the load generator, backends, the fake LLM, nats-server)."""

_LISTENING = re.compile(rb"listening on (http://\S+)")


def cpus_available() -> bool:
    """True when both benchmark cores exist, so pinning means something."""
    try:
        return {SUT_CPU, LOAD_CPU} <= os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return False


def pin(pid: int, cpu: int) -> None:
    """Pin ``pid`` (0: this process) to ``cpu``; a no-op where affinity is not supported."""
    if cpus_available():
        os.sched_setaffinity(pid, {cpu})


def unpin() -> None:
    """Let this process run on every core again."""
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setaffinity(0, range(os.cpu_count() or 1))


class Child:
    """A child process pinned to ``cpu``; ``with Child(...) as child: child.url``."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cpu: int,
        log: Path,
        env: Mapping[str, str] | None = None,
        wait_for_url: bool = True,
        start_timeout_s: float = 20.0,
    ) -> None:
        self.argv = list(argv)
        self.cpu = cpu
        self.log = log
        self.env = {**os.environ, **(env or {})}
        self.wait_for_url = wait_for_url
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    @classmethod
    def python(
        cls, module: str, *args: str, cpu: int, log: Path, env: Mapping[str, str] | None = None
    ) -> "Child":
        """``python -m module args...`` with this interpreter."""
        return cls([sys.executable, "-m", module, *args], cpu=cpu, log=log, env=env)

    def start(self) -> "Child":
        cpu = self.cpu

        def setup() -> None:
            die_with_parent()
            if cpus_available():
                os.sched_setaffinity(0, {cpu})

        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                preexec_fn=setup,
            )
        if self.wait_for_url:
            self.url = self._await_url()
        return self

    def _await_url(self) -> str:
        assert self.process is not None
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            found = _LISTENING.search(self.log.read_bytes())
            if found:
                return found.group(1).decode()
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        tail = self.log.read_text(errors="replace")[-2000:]
        self.stop()
        raise RuntimeError(f"{' '.join(self.argv[:4])} did not start; its log ends:\n{tail}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s; safe to call twice."""
        if self.process is None:
            return
        stop_process(self.process)
        self.process = None

    def __enter__(self) -> "Child":
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
