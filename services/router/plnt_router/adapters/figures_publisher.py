"""Publishes the router's cumulative call totals on core NATS, about once a second.

One ``RouterFigures`` message per workflow on ``plnt.figures.router.<ns>.<name>``, named
by this router's instance id, so a reader sums the latest message of every replica.
Core NATS rather than the stream: only the latest totals matter, and a message lost while
the bus is away is replaced by the next one. The counters start at zero with the process;
readers take a total that went down as a restart. Decides nothing about the figures.
"""

import asyncio
import os
import socket

from nats.aio.client import Client

from plnt_common.figures import RouterFigures
from plnt_common.logs import get_logger
from plnt_common.subjects import router_figures_subject
from plnt_router.live_figures import LiveTotals
from plnt_router.metrics import InvocationMetrics

log = get_logger(__name__)


def router_instance_id() -> str:
    """``<hostname>-<pid>``: a pod keeps its name across a restart, pid 1 included, which
    readers see as a counter reset; a local restart gets another pid, i.e. a new source."""
    return f"{socket.gethostname()}-{os.getpid()}"


class FiguresPublisher:
    """Publishes every workflow's totals each ``interval_s`` until cancelled."""

    def __init__(
        self,
        *,
        nc: Client,
        metrics: InvocationMetrics,
        interval_s: float,
        router: str | None = None,
    ) -> None:
        self._nc = nc
        self._totals = LiveTotals(metrics)
        self._interval_s = interval_s
        self._router = router or router_instance_id()

    async def run(self) -> None:
        while True:
            try:
                await self.publish_once()
            except Exception as exc:  # the bus is away: the next round publishes again
                log.debug("router.figures_not_published", error=str(exc))
            await asyncio.sleep(self._interval_s)

    async def publish_once(self) -> None:
        """Publish the current totals of every workflow that has served a call."""
        for (namespace, name), revisions in (await self._totals.collect()).items():
            figures = RouterFigures(
                router=self._router, namespace=namespace, name=name, revisions=revisions
            )
            await self._nc.publish(
                router_figures_subject(namespace, name), figures.model_dump_json().encode()
            )
