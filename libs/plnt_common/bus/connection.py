"""Connecting to NATS with the reconnect policy every service shares."""

import asyncio
from typing import Any

import nats
from nats.aio.client import Client
from nats.errors import NoServersError

from plnt_common.errors import BusUnavailable
from plnt_common.logs import get_logger

log = get_logger(__name__)


async def connect(
    url: str, *, name: str = "plnt", connect_timeout: float = 2.0, retry_on_start: bool = False
) -> Client:
    """Connect to NATS and keep reconnecting for ever once connected.

    Raises ``BusUnavailable`` naming the URL when the first connection fails and
    ``retry_on_start`` is false (the CLI); services pass true and wait for the bus.
    """

    async def on_error(exc: Exception) -> None:
        log.warning("nats.error", error=str(exc) or type(exc).__name__)

    async def on_disconnect() -> None:
        log.info("nats.disconnected")

    async def on_reconnect() -> None:
        log.info("nats.reconnected")

    options: dict[str, Any] = {
        "servers": [u.strip() for u in url.split(",") if u.strip()],
        "name": name,
        "connect_timeout": connect_timeout,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 0.5,
        "allow_reconnect": True,
        "error_cb": on_error,
        "disconnected_cb": on_disconnect,
        "reconnected_cb": on_reconnect,
        "pending_size": 64 * 1024 * 1024,
    }
    warned = False
    while True:
        try:
            return await nats.connect(**options)
        except (NoServersError, OSError, TimeoutError) as exc:
            if not retry_on_start:
                raise BusUnavailable(
                    f"cannot reach NATS at {url} ({type(exc).__name__}); is `plnt up` running? "
                    "Set --nats or PLNT_NATS_URL to point elsewhere"
                ) from None
            if not warned:
                log.warning("nats.waiting_for_server", url=url, error=type(exc).__name__)
                warned = True
            await asyncio.sleep(0.5)
