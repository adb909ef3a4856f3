"""Process entry for every service: logging, signals and a graceful stop.

SIGTERM and SIGINT set one ``stop`` event; the service stops fetching, lets in-flight
handlers finish and ack, drains its connection, and returns. With ``metrics_port`` set,
Prometheus metrics are served on it.
"""

import asyncio
import signal
from collections.abc import Awaitable, Callable

from prometheus_client import start_http_server

from plnt_common import event_loop
from plnt_common.logs import configure_logging, get_logger
from plnt_common.settings import CommonSettings

ServiceBody = Callable[[asyncio.Event], Awaitable[None]]


def run_service(name: str, settings: CommonSettings, body: ServiceBody) -> None:
    """Run ``body(stop)`` until it returns; a signal sets ``stop``."""
    configure_logging(level=settings.log_level, fmt=settings.log_format, service=name)
    log = get_logger(name)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if settings.metrics_port:
            # prometheus_client's own server thread: /metrics without an HTTP framework
            start_http_server(settings.metrics_port, addr="0.0.0.0")
            log.info("metrics.serving", port=settings.metrics_port)
        log.info("service.starting", nats=settings.nats_url)
        await body(stop)
        log.info("service.stopped")

    event_loop.run(main())
