"""Child-process helpers shared by ``plnt up``, the local backend, tests and benchmarks."""

import contextlib
import ctypes
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """``preexec_fn``: ask Linux to SIGTERM this child when its parent dies (no-op elsewhere).

    Keeps a ``kill -9`` of ``plnt up`` from leaving a nats-server or a service behind.
    Linux sends it when the *thread* that started the child ends: start children from a
    thread that lives as long as they should (``plnt up``'s main or supervisor thread),
    never from a short-lived worker such as ``asyncio.to_thread``'s.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))


def stop_process(
    process: "subprocess.Popen[bytes]", *, kill: bool = False, grace_s: float = 10.0
) -> None:
    """SIGTERM (SIGKILL with ``kill``), then SIGKILL if it is still running after ``grace_s``."""
    if process.poll() is not None:
        return
    if kill:
        process.kill()
    else:
        process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
