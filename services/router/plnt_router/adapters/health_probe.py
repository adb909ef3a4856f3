"""Asks the health route of every backend endpoint the routes list.

Every ``interval_s`` each endpoint gets one ``GET <url>/healthz`` (the runner's health
route: 200 once its workflow is loaded, 503 while it starts). For an endpoint
``EndpointHealth`` holds down, a 200 within ``timeout_s`` brings it back on its ramp; for
one that is up, failed probes in a row take it out, since a runner that accepts
connections but answers nothing (hung, its host stalled) gives the calls nothing to
count until their own timeout. The same loop keeps the
``plnt_router_backend_up`` gauge equal to what the table and the health say, and forgets
the health of endpoints no route lists any more. Decides nothing about routing.
"""

import asyncio
from collections.abc import Iterator

import aiohttp

from plnt_common.logs import get_logger
from plnt_router.endpoint_health import EndpointHealth
from plnt_router.metrics import BACKEND_UP
from plnt_router.table import RouteTable

log = get_logger(__name__)

RUNNER_HEALTH_PATH = "/healthz"
"""The runner's health route (``plnt_runner.app``): 200 when it can take calls."""

_Series = tuple[str, str, str]


class HealthProber:
    """Probes every endpoint and publishes the health gauge until cancelled."""

    def __init__(
        self, *, table: RouteTable, health: EndpointHealth, interval_s: float, timeout_s: float
    ) -> None:
        self._table = table
        self._health = health
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._published: set[_Series] = set()
        health.on_change = self.publish

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self._timeout_s)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session:
                await self._probe_forever(session)
        finally:
            for series in self._published:  # a stopped router reports nothing
                BACKEND_UP.remove(*series)
            self._published = set()

    async def _probe_forever(self, session: aiohttp.ClientSession) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            urls = sorted({url for _, _, _, url, _ in self._endpoints()})
            self._health.forget_except(urls)
            down = set(self._health.down())
            answers = await asyncio.gather(*(self._probe(session, url) for url in urls))
            for url, healthy in zip(urls, answers, strict=True):
                if url in down and healthy:
                    log.info("router.endpoint_back", url=url)
                    self._health.recovered(url)
                elif healthy:
                    self._health.probe_answered(url)
                elif url not in down:
                    self._health.probe_failed(url)
                    if not self._health.is_up(url):
                        log.warning("router.endpoint_unanswering", url=url)
            self.publish()

    async def _probe(self, session: aiohttp.ClientSession, url: str) -> bool:
        try:
            async with session.get(url.rstrip("/") + RUNNER_HEALTH_PATH) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return False

    def publish(self) -> None:
        """Set ``plnt_router_backend_up`` for every listed endpoint; drop the rest."""
        seen: set[_Series] = set()
        for workflow, revision, backend, url, serving in self._endpoints():
            series = (workflow, revision, backend)
            seen.add(series)
            up = serving and self._health.is_up(url)
            BACKEND_UP.labels(*series).set(1 if up else 0)
        for series in self._published - seen:
            BACKEND_UP.remove(*series)
        self._published = seen

    def _endpoints(self) -> Iterator[tuple[str, str, str, str, bool]]:
        """(workflow, revision, backend, url, serving) of every spread target's endpoints."""
        for route in self._table.routes():
            entry = route.listed or route.entry
            workflow = f"{entry.namespace}/{entry.name}"
            for target in (entry.stable, entry.canary):
                if target is None:
                    continue
                for endpoint in target.endpoints:
                    serving = target.serving and endpoint.serving
                    yield workflow, target.revision, endpoint.backend, endpoint.url, serving
