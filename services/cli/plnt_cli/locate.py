"""Finding the bus: ``--nats``, then ``PLNT_NATS_URL``, then a running ``plnt up``.

``plnt up`` records where it listens in ``$PLNT_HOME/up.json`` (default ``~/.plnt``) while
it runs, so every other command finds it without flags.
"""

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from plnt_common.settings import DEFAULT_NATS_URL


def plnt_home() -> Path:
    return Path(os.environ.get("PLNT_HOME") or Path.home() / ".plnt")


def pointer_path() -> Path:
    return plnt_home() / "up.json"


@dataclass(frozen=True)
class RunningStack:
    """What a running ``plnt up`` publishes about itself."""

    pid: int
    nats_url: str
    router_url: str
    data_dir: str


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_pointer(stack: RunningStack) -> None:
    path = pointer_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(stack)))
    tmp.replace(path)


def clear_pointer(pid: int) -> None:
    """Remove the pointer if it is still ours (a newer ``plnt up`` may own it)."""
    stack = running_stack()
    if stack is not None and stack.pid == pid:
        pointer_path().unlink(missing_ok=True)


def running_stack() -> RunningStack | None:
    """The ``plnt up`` still running, if its pointer is there and its pid alive."""
    try:
        data = json.loads(pointer_path().read_text())
        stack = RunningStack(**data)
    except (OSError, ValueError, TypeError):
        return None
    return stack if pid_alive(stack.pid) else None


def resolve_nats_url(flag: str | None) -> str:
    if flag:
        return flag
    if os.environ.get("PLNT_NATS_URL"):
        return os.environ["PLNT_NATS_URL"]
    stack = running_stack()
    return stack.nats_url if stack else DEFAULT_NATS_URL
