"""``plnt up``: the embedded stack in the foreground until Ctrl-C."""

import asyncio
import os
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import aiohttp
from nats.js.errors import NotFoundError

from plnt_cli.locate import RunningStack, clear_pointer, running_stack, write_pointer
from plnt_cli.supervisor import (
    SAGA_SERVICES,
    StackConfig,
    Supervisor,
    choose_port,
    embedded_nats_auth,
)
from plnt_common import subjects
from plnt_common.bus.connection import connect
from plnt_common.errors import PlntError
from plnt_common.nats_server import LOCAL_SYNC_INTERVAL, free_ports

DEFAULT_NATS_PORT = 4222
DEFAULT_ROUTER_PORT = 8080
DEFAULT_CONSOLE_PORT = 8081


def default_data_dir() -> Path:
    from plnt_cli.locate import plnt_home

    return plnt_home() / "data"


def stack_config(
    *,
    data_dir: Path | None,
    nats_port: int | None,
    router_port: int | None,
    replicas: int,
    say: Callable[[str], None],
    fresh: bool = False,
    nats_sync_interval: str = LOCAL_SYNC_INTERVAL,
    nats_cluster: int = 1,
    console_port: int | None = None,
) -> StackConfig:
    if fresh:
        chosen_dir = Path(tempfile.mkdtemp(prefix="plnt-demo-"))
    else:
        chosen_dir = (data_dir or default_data_dir()).expanduser().resolve()
        other = running_stack()
        if other is not None and Path(other.data_dir) == chosen_dir:
            raise PlntError(
                f"plnt up is already running (pid {other.pid}) on {chosen_dir}; "
                "stop it, or pass another --data-dir"
            )
    chosen_dir.mkdir(parents=True, exist_ok=True)
    nats = choose_port(nats_port, DEFAULT_NATS_PORT, "NATS", say)
    router = choose_port(
        router_port, DEFAULT_ROUTER_PORT, "the router", say, chosen_already=(nats,)
    )
    console = choose_port(
        console_port, DEFAULT_CONSOLE_PORT, "the console", say, chosen_already=(nats, router)
    )
    return StackConfig(
        data_dir=chosen_dir,
        nats_port=nats,
        router_port=router,
        replicas=replicas,
        nats_sync_interval=nats_sync_interval,
        nats_peer_ports=peer_ports(nats_cluster - 1, taken=(nats, router, console)),
        console_port=console,
        nats_auth=embedded_nats_auth(),
    )


def peer_ports(count: int, *, taken: tuple[int, ...]) -> tuple[int, ...]:
    """Client ports for a local cluster's other nodes, none of them one already ``taken``."""
    candidates = free_ports(count + len(taken))
    return tuple(port for port in candidates if port not in taken)[:count]


class StopFlag:
    """Set by a signal handler, read by the main thread: a plain flag.

    Not a ``threading.Event``: its ``set`` takes a lock, and a second signal landing while
    the handler of the first holds it (two Ctrl-C, a service manager's SIGTERM beside
    one) re-enters the handler on the same thread, which then waits for itself forever.
    """

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout_s: float) -> bool:
        """Sleep ``timeout_s`` unless already set; whether it is set now."""
        if not self._set:
            time.sleep(timeout_s)
        return self._set


async def wait_until_ready(
    config: StackConfig, *, timeout_s: float = 60.0, stop: StopFlag | None = None
) -> bool:
    """Ready once every saga service has bound its consumer and the router loaded its routes.

    Returns False, at once, when ``stop`` is set first (a Ctrl-C during start-up)."""
    if stop is None:
        await _services_ready(config, timeout_s=timeout_s)
        return True
    waiting = asyncio.create_task(_services_ready(config, timeout_s=timeout_s))
    while not waiting.done() and not stop.is_set():
        await asyncio.wait((waiting,), timeout=0.05)
    if not waiting.done():
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        return False
    await waiting
    return True


async def _services_ready(config: StackConfig, *, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    nc = await connect(config.nats_url, name="plnt-up", retry_on_start=True)
    js = nc.jetstream()
    try:
        pending = set(SAGA_SERVICES)
        while pending and time.monotonic() < deadline:
            for service in sorted(pending):
                try:
                    await js.consumer_info(subjects.STREAM, subjects.durable_name(service))
                    pending.discard(service)
                except (NotFoundError, Exception):
                    pass
            if pending:
                await asyncio.sleep(0.1)
        if pending:
            raise PlntError(
                f"services did not start within {timeout_s:g}s: {', '.join(sorted(pending))}"
            )
        async with aiohttp.ClientSession() as http:
            while True:
                try:
                    async with http.get(f"{config.router_url}/readyz") as response:
                        if response.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                if time.monotonic() > deadline:
                    raise PlntError(
                        f"the router did not answer on {config.router_url} within {timeout_s:g}s"
                    )
                await asyncio.sleep(0.1)
    finally:
        await nc.close()


class Stack:
    """A started stack that records itself for other CLI commands and stops cleanly."""

    def __init__(self, config: StackConfig, *, say: Callable[[str], None]) -> None:
        self.config = config
        self.supervisor = Supervisor(config, say=say)
        self._say = say

    def start(self) -> None:
        self.supervisor.start()
        write_pointer(
            RunningStack(
                pid=os.getpid(),
                nats_url=self.config.nats_url,
                router_url=self.config.router_url,
                data_dir=str(self.config.data_dir),
            )
        )

    def stop(self) -> None:
        self.supervisor.stop()
        clear_pointer(os.getpid())


def run_up(config: StackConfig, *, say: Callable[[str], None]) -> int:
    """Start the stack, wait until it is ready, run until SIGINT or SIGTERM, stop it.

    A signal at any moment, start-up included, stops whatever was started: the handler
    only sets ``stopping``, and every step below either checks it or is short."""
    stack = Stack(config, say=say)
    stopping = StopFlag()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    code = 0
    try:
        stack.start()
        if not stopping.is_set() and asyncio.run(wait_until_ready(config, stop=stopping)):
            console = f", console {config.console_url}" if config.console_url else ""
            say(f"plnt is up: NATS {config.nats_url}, router {config.router_url}{console}")
            if config.nats_auth is not None:
                way = "PLNT_NATS_TOKEN" if config.nats_auth.token else "PLNT_NATS_USER/PASSWORD"
                say(f"NATS asks every client for {way}, as set in this environment")
            if os.environ.get("PLNT_ROUTER_AUTH", "none") == "none":
                say("the router takes calls without API keys (PLNT_ROUTER_AUTH=none; loopback)")
            say(f"data and logs in {config.data_dir} (logs/<service>.log); Ctrl-C stops everything")
            while not stopping.wait(0.5):
                pass
    except PlntError as exc:
        say(f"plnt: {exc}")
        code = 1
    finally:
        say("stopping…")
        stack.stop()
        say("stopped")
    return code
