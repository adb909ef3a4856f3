"""``FiguresSource`` over the totals every router publishes on the bus (the default).

It follows ``plnt.figures.router.>`` on core NATS from ``start`` on and keeps, per
workflow, the latest totals of each router instance; ``totals`` sums them, a router whose
totals went down counted as restarted (``ResetAwareTotals``). Routers publish about once a
second, so right after ``start`` a reading waits until every router has had its turn:
a first reading of nothing followed by a router's whole history would read as one window.
It decides nothing about the figures.
"""

import asyncio

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from pydantic import ValidationError

from plnt_common.figures import FiguresUnavailable, ResetAwareTotals, RevisionTotals, RouterFigures
from plnt_common.logs import get_logger
from plnt_common.subjects import router_figures_filter

log = get_logger(__name__)

SETTLE_S = 1.5
"""Above the routers' publish interval (``PLNT_ROUTER_FIGURES_INTERVAL_S``, 1 s)."""


class BusFigures:
    """Live totals from the routers' published figures; ``start`` before reading."""

    def __init__(self, *, nc: Client, settle_s: float = SETTLE_S) -> None:
        self._nc = nc
        self._settle_s = settle_s
        self._workflows: dict[tuple[str, str], ResetAwareTotals] = {}
        self._subscription: Subscription | None = None
        self._ready_at = 0.0

    async def start(self) -> None:
        """Subscribe; readings are complete ``settle_s`` later."""
        self._subscription = await self._nc.subscribe(router_figures_filter(), cb=self._take)
        self._ready_at = asyncio.get_running_loop().time() + self._settle_s

    async def close(self) -> None:
        if self._subscription is not None:
            await self._subscription.unsubscribe()
            self._subscription = None

    async def totals(self, *, namespace: str, name: str) -> dict[str, RevisionTotals]:
        """Summed over every router; empty when no router served the workflow yet.

        Raises ``FiguresUnavailable`` when not started or the bus connection is down.
        """
        if self._subscription is None:
            raise FiguresUnavailable("the bus figures source was not started")
        if not self._nc.is_connected:
            raise FiguresUnavailable("the bus is unreachable: router figures are not arriving")
        wait_s = self._ready_at - asyncio.get_running_loop().time()
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        figures = self._workflows.get((namespace, name))
        return figures.totals() if figures is not None else {}

    async def _take(self, msg: Msg) -> None:
        try:
            figures = RouterFigures.model_validate_json(msg.data)
        except ValidationError as exc:
            log.warning("promoter.figures_unreadable", subject=msg.subject, error=str(exc))
            return
        workflow = (figures.namespace, figures.name)
        self._workflows.setdefault(workflow, ResetAwareTotals()).report(
            source=figures.router, totals=figures.revisions
        )
