"""Process entry for every service: logging, signals and a graceful stop.

SIGTERM and SIGINT set one ``stop`` event; the service stops fetching, lets in-flight
handlers finish and ack, drains its connection, and returns. A service with no live NATS
connection when told to stop (still waiting for the first server, or reconnecting) is
cancelled at once: nothing it holds can be acknowledged, the server redelivers it. With
``metrics_port`` set, ``/metrics``, ``/healthz`` and ``/readyz`` are served on it
(``plnt_common.health``).
"""

import asyncio
import signal
from collections.abc import Awaitable, Callable

from plnt_common import event_loop, health
from plnt_common.bus import auth
from plnt_common.bus.connection import any_connected
from plnt_common.errors import BusMisconfigured
from plnt_common.logs import configure_logging, get_logger
from plnt_common.settings import CommonSettings

ServiceBody = Callable[[asyncio.Event], Awaitable[None]]

STOP_GRACE_S = 30.0
"""How long a connected service may take to finish its handlers after a stop signal."""
CANCEL_GRACE_S = 2.0
"""How long a cancelled body may take to run its clean-up."""

log = get_logger(__name__)


def run_service(name: str, settings: CommonSettings, body: ServiceBody) -> None:
    """Run ``body(stop)`` until it returns; a signal sets ``stop``."""
    configure_logging(level=settings.log_level, fmt=settings.log_format, service=name)
    service_log = get_logger(name)
    try:
        auth.connect_options()  # refused here in one line, not in a reconnect loop
    except BusMisconfigured as exc:
        raise SystemExit(f"plnt: {exc}") from None

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        probes = None
        if settings.metrics_port:
            probes = await health.serve_probes(settings.metrics_port)
            service_log.info("metrics.serving", port=settings.metrics_port)
        service_log.info("service.starting", nats=settings.nats_url)
        try:
            await run_until_stopped(body, stop)
        finally:
            if probes is not None:
                await probes.cleanup()
        service_log.info("service.stopped")

    try:
        event_loop.run(main())
    except BusMisconfigured as exc:  # found connecting (a TLS handshake refused): one line
        raise SystemExit(f"plnt: {exc}") from None


async def run_until_stopped(body: ServiceBody, stop: asyncio.Event) -> None:
    """``body(stop)``; once ``stop`` is set, it gets ``STOP_GRACE_S`` to return while
    connected, and is cancelled at once while no connection is up."""
    running: asyncio.Future[None] = asyncio.ensure_future(body(stop))
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait((running, stopped), return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if not stop.is_set():
        await running  # returned or crashed on its own: a crash makes the supervisor restart it
        return
    await _finish_or_cancel(running)
    if not running.done():
        log.warning("service.stuck_after_cancel")
    elif running.cancelled():
        log.info("service.cancelled")
    elif running.exception() is not None:
        log.warning("service.stop_error", error=repr(running.exception()))


async def _finish_or_cancel(running: "asyncio.Future[None]") -> None:
    loop = asyncio.get_running_loop()
    give_up_at = loop.time() + STOP_GRACE_S
    while not running.done() and any_connected() and loop.time() < give_up_at:
        await asyncio.wait((running,), timeout=0.1)
    if running.done():
        return
    log.info("service.cancelling", connected=any_connected())
    running.cancel()
    await asyncio.wait((running,), timeout=CANCEL_GRACE_S)
