"""Connecting to NATS with the reconnect policy every service shares."""

from collections.abc import Callable
from typing import Any

import nats
from nats.aio.client import Client
from nats.errors import NoServersError

from plnt_common.errors import BusUnavailable
from plnt_common.logs import get_logger

log = get_logger(__name__)


async def connect(
    url: str,
    *,
    name: str = "plnt",
    connect_timeout: float = 2.0,
    retry_on_start: bool = False,
    on_reconnected: Callable[[], None] | None = None,
) -> Client:
    """Connect to NATS.

    Services pass ``retry_on_start``: they wait for the server and reconnect for ever.
    Otherwise (the CLI) a failed first connection raises ``BusUnavailable`` naming the URL.
    """

    async def on_error(exc: Exception) -> None:
        # info, not warning: a reconnecting client reports every failed attempt here
        log.info("nats.error", error=str(exc) or type(exc).__name__)

    async def on_disconnect() -> None:
        log.info("nats.disconnected")

    async def on_reconnect() -> None:
        log.info("nats.reconnected")
        if on_reconnected is not None:
            on_reconnected()

    options: dict[str, Any] = {
        "servers": [u.strip() for u in url.split(",") if u.strip()],
        "name": name,
        "connect_timeout": connect_timeout,
        # -1 also makes the first connect wait for the server: what a service wants.
        # A CLI command instead fails after a few tries with a message naming the URL.
        "max_reconnect_attempts": -1 if retry_on_start else 2,
        "reconnect_time_wait": 0.5,
        "allow_reconnect": True,
        "error_cb": on_error,
        "disconnected_cb": on_disconnect,
        "reconnected_cb": on_reconnect,
        "pending_size": 64 * 1024 * 1024,
    }
    if retry_on_start:
        log.info("nats.connecting", url=url)
        return await nats.connect(**options)
    try:
        return await nats.connect(**options)
    except (NoServersError, OSError, TimeoutError) as exc:
        raise BusUnavailable(
            f"cannot reach NATS at {url} ({type(exc).__name__}); is `plnt up` running? "
            "Set --nats or PLNT_NATS_URL to point elsewhere"
        ) from None
