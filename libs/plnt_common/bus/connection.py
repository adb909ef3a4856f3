"""Connecting to NATS with the reconnect policy every service shares.

``PLNT_NATS_URL`` (and ``--nats``) may name several servers, comma separated: the client
connects to any of them and fails over to the others.

A server that stops answering without closing the connection (a frozen process, a
partition) is noticed by pings: every ``PLNT_NATS_PING_INTERVAL`` (5 s), and after
``PLNT_NATS_MAX_OUTSTANDING_PINGS`` (2) unanswered the connection is dropped and the
client reconnects to another server, within about 15 s. nats-py's own defaults (120 s,
2) took 6 minutes, during which publishes timed out and heartbeats went nowhere.
"""

import asyncio
import contextlib
import ssl
import weakref
from collections.abc import Callable
from typing import Any

from nats.aio.client import Client, Server
from nats.errors import Error as NatsError
from nats.errors import NoServersError

from plnt_common.bus import auth
from plnt_common.errors import BusMisconfigured, BusUnavailable
from plnt_common.logs import get_logger
from plnt_common.settings import bus_settings

log = get_logger(__name__)

RECONNECT_WAIT_S = 0.5
"""The pause between rounds of reconnect attempts over every server."""

_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()
"""Every client this process opened, connecting ones included: see ``any_connected``."""


def server_urls(url: str) -> list[str]:
    """The servers a comma-separated ``url`` names, blanks dropped."""
    return [part.strip() for part in url.split(",") if part.strip()]


class ReconnectOrder:
    """Which server a reconnect tries next: the others in turn first, the one just left
    last; that one, and one tried before in this reconnect, only after ``wait_s``.

    A frozen node still accepts TCP connections and answers nothing, so trying it again
    first (nats-py shuffles its pool on every reconnect) spent ``connect_timeout`` more
    before the client reached a live node."""

    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s
        self.left: str | None = None
        self.round: list[str] = []
        self.tried: set[str] = set()

    def connected(self, netloc: str | None) -> None:
        """The client is on ``netloc`` now: the next reconnect leaves it."""
        self.left = netloc
        self.round = []
        self.tried = {netloc} if netloc else set()  # just left: not again at once

    def __call__(self, servers: list[Server], info: dict[str, Any]) -> tuple[Server | None, float]:
        order = sorted(servers, key=lambda server: server.uri.netloc == self.left)
        untried = [server for server in order if server.uri.netloc not in self.round]
        if not untried:  # every server failed once more: from the top again
            self.round = []
            untried = order
        if not untried:
            return None, 0.0
        chosen = untried[0].uri.netloc
        delay = self.wait_s if chosen in self.tried else 0.0
        self.round.append(chosen)
        self.tried.add(chosen)
        return untried[0], delay


def any_connected() -> bool:
    """True while some client of this process is connected to a server.

    A service told to stop with no live connection has nothing to finish (no ack can
    reach the server), so it stops at once instead of waiting for a bus that may never
    come back (``plnt_common.runtime``)."""
    return any(client.is_connected for client in _clients)


async def connect(
    url: str,
    *,
    name: str = "plnt",
    connect_timeout: float = 2.0,
    retry_on_start: bool = False,
    on_reconnected: Callable[[], None] | None = None,
    ping_interval_s: float | None = None,
    max_outstanding_pings: int | None = None,
) -> Client:
    """Connect to NATS.

    Services pass ``retry_on_start``: they wait for the server and reconnect for ever.
    Otherwise (the CLI) a failed first connection raises ``BusUnavailable`` naming the URL.
    ``ping_interval_s`` and ``max_outstanding_pings`` default to ``PLNT_NATS_PING_INTERVAL``
    and ``PLNT_NATS_MAX_OUTSTANDING_PINGS``.
    """
    settings = bus_settings()
    if ping_interval_s is None:
        ping_interval_s = settings.ping_interval_s
    if max_outstanding_pings is None:
        max_outstanding_pings = settings.max_outstanding_pings

    errors: list[str] = []

    tls_failure: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def on_error(exc: Exception) -> None:
        # info, not warning: a reconnecting client reports every failed attempt here
        errors.append(str(exc) or type(exc).__name__)
        log.info("nats.error", error=errors[-1])
        if isinstance(exc, ssl.SSLError) and not tls_failure.done():
            tls_failure.set_result(errors[-1])

    async def on_disconnect() -> None:
        log.info("nats.disconnected")

    order = ReconnectOrder(RECONNECT_WAIT_S)

    async def on_reconnect() -> None:
        order.connected(_netloc(client))
        log.info("nats.reconnected", server=_netloc(client))
        if on_reconnected is not None:
            on_reconnected()

    options: dict[str, Any] = {
        "servers": server_urls(url),
        "name": name,
        "connect_timeout": connect_timeout,
        # -1 also makes the first connect wait for the server: what a service wants.
        # A CLI command instead fails after a few tries with a message naming the URL.
        "max_reconnect_attempts": -1 if retry_on_start else 2,
        "reconnect_time_wait": RECONNECT_WAIT_S,
        "reconnect_to_server_handler": order,
        # nats-py takes whole seconds in its type, but sleeps any float
        "ping_interval": ping_interval_s,
        "max_outstanding_pings": max_outstanding_pings,
        "allow_reconnect": True,
        "error_cb": on_error,
        "disconnected_cb": on_disconnect,
        "reconnected_cb": on_reconnect,
        "pending_size": 64 * 1024 * 1024,
        **auth.connect_options(),
    }
    client = Client()
    _clients.add(client)
    if retry_on_start:
        log.info("nats.connecting", url=url)
        await _connect(client, options, url=url, tls_failure=tls_failure, misconfigured=True)
        order.connected(_netloc(client))
        return client
    try:
        await _connect(client, options, url=url, tls_failure=tls_failure, misconfigured=False)
        order.connected(_netloc(client))
        return client
    except (NoServersError, OSError, TimeoutError) as exc:
        if refused := next((e for e in errors if "authorization" in e.lower()), None):
            raise BusUnavailable(
                f"NATS at {url} refused plnt's credentials ({refused}): set PLNT_NATS_TOKEN, "
                "PLNT_NATS_USER and PLNT_NATS_PASSWORD, or PLNT_NATS_CREDS"
            ) from None
        raise BusUnavailable(
            f"cannot reach NATS at {url} ({type(exc).__name__}); is `plnt up` running? "
            "Set --nats or PLNT_NATS_URL to point elsewhere"
        ) from None


async def _connect(
    client: Client,
    options: dict[str, Any],
    *,
    url: str,
    tls_failure: "asyncio.Future[str]",
    misconfigured: bool,
) -> None:
    """``client.connect``, or one error as soon as the TLS handshake fails.

    nats-py never returns from a connect whose TLS handshake failed (its close waits for a
    socket the handshake already gave away), and a certificate the client does not trust
    does not become trusted by retrying: a service stops at start (``BusMisconfigured``),
    a command says so (``BusUnavailable``)."""
    connecting: asyncio.Future[Any] = asyncio.ensure_future(client.connect(**options))
    either: set[asyncio.Future[Any]] = {connecting, tls_failure}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not connecting.done():
            connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await connecting
    if connecting.done() and not connecting.cancelled():
        connecting.result()
        return
    problem = (
        f"NATS at {url}: the TLS handshake failed ({tls_failure.result()}); set "
        "PLNT_NATS_TLS_CA to the CA that signed the server's certificate"
    )
    raise BusMisconfigured(problem) if misconfigured else BusUnavailable(problem)


def _netloc(client: Client) -> str | None:
    url = client.connected_url
    return url.netloc if url is not None else None


async def wait_for_jetstream(url: str, *, timeout_s: float = 30.0) -> None:
    """Wait until JetStream answers at ``url``: a new cluster first elects a meta leader.

    Raises ``BusUnavailable`` after ``timeout_s``."""
    try:
        async with asyncio.timeout(timeout_s):
            client = await connect(url, name="plnt-wait", retry_on_start=True)
            try:
                js = client.jetstream(timeout=0.5)
                while True:
                    try:
                        await js.account_info()
                        return
                    except (NatsError, TimeoutError):  # no meta leader yet
                        await asyncio.sleep(0.1)
            finally:
                await client.close()
    except TimeoutError:
        raise BusUnavailable(f"JetStream at {url} did not answer within {timeout_s:g}s") from None
