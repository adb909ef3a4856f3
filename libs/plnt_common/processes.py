"""Child-process helpers shared by ``plnt up`` and the local backend."""

import contextlib
import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """``preexec_fn``: ask Linux to SIGTERM this child when its parent dies (no-op elsewhere).

    Keeps a ``kill -9`` of ``plnt up`` from leaving a nats-server or a service behind.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
