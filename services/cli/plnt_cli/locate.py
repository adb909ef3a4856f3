"""Finding the bus: ``--nats``, then ``PLNT_NATS_URL``, then a running ``plnt up``.

``plnt up`` records where it listens in ``$PLNT_HOME/up.json`` (default ``~/.plnt``) while
it runs, so every other command finds it without flags.
"""

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit

from plnt_common.bus.connection import server_urls
from plnt_common.errors import PlntError
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
    """``--nats``, else ``PLNT_NATS_URL``, else the running ``plnt up``; raises ``PlntError``
    for a URL the client could not parse."""
    if flag:
        return checked_nats_url(flag, source="--nats")
    if os.environ.get("PLNT_NATS_URL"):
        return checked_nats_url(os.environ["PLNT_NATS_URL"], source="PLNT_NATS_URL")
    stack = running_stack()
    return stack.nats_url if stack else DEFAULT_NATS_URL


def checked_nats_url(url: str, *, source: str) -> str:
    """``url`` if every comma-separated server in it has a valid host and port."""
    for server in server_urls(url):
        try:
            _port_of(server)
        except ValueError as exc:
            raise PlntError(f"{source} {url!r}: {server!r} is not a NATS URL ({exc})") from None
    return url


def _port_of(server: str) -> int | None:
    """Raises ``ValueError`` for a server nats-py could not connect to by its URL."""
    # nats-py reads a bare host[:port] as nats://host[:port]
    return urlsplit(server if "://" in server else f"nats://{server}").port
