"""HTTP probe of a runner's ``GET /healthz``: 200 means ready, anything else means not yet.

One pooled aiohttp session for every probe of the process. It reports; it does not
decide what an unhealthy runner means (``logic`` and the supervisor do).
"""

import asyncio
from types import TracebackType

import aiohttp

HEALTH_PATH = "/healthz"


class HealthProbe:
    """Use as ``async with HealthProbe(timeout_s=...) as probe``."""

    def __init__(self, *, timeout_s: float = 1.0) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> "HealthProbe":
        # No keep-alive: probes are rare, and a pooled connection to a runner that was
        # replaced on the same port would answer for the wrong process.
        self._session = aiohttp.ClientSession(
            timeout=self._timeout, connector=aiohttp.TCPConnector(force_close=True)
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def healthy(self, url: str) -> bool:
        """True when ``<url>/healthz`` answers 200; False on any other answer or no answer."""
        if self._session is None:
            raise RuntimeError("HealthProbe used outside `async with`")
        try:
            async with self._session.get(url.rstrip("/") + HEALTH_PATH) as response:
                return response.status == 200
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False

    async def healthy_within(self, url: str, *, timeout_s: float, interval_s: float) -> bool:
        """Probe until healthy or ``timeout_s`` passed: one slow answer is not a dead runner."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            if await self.healthy(url):
                return True
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(interval_s)
