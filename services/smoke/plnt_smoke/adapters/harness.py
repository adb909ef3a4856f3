"""Calls a canary's ``POST /invoke`` N times with bounded concurrency over one pooled session."""

import asyncio
import time
from typing import Any

import aiohttp

from plnt_smoke.logic import Sample


class SmokeHarness:
    def __init__(self, *, request_timeout_s: float) -> None:
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> "SmokeHarness":
        self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def invoke_many(
        self, *, url: str, payload: dict[str, Any], invocations: int, concurrency: int
    ) -> list[Sample]:
        """Every invocation's sample; errors are samples too, never exceptions."""
        assert self._session is not None, "use SmokeHarness as an async context manager"
        session = self._session
        slots = asyncio.Semaphore(concurrency)

        async def one() -> Sample:
            async with slots:
                started = time.perf_counter()
                try:
                    async with session.post(f"{url}/invoke", json=payload) as response:
                        body = await response.read()
                        elapsed = (time.perf_counter() - started) * 1000
                        if response.status >= 300:
                            detail = body[:200].decode(errors="replace")
                            return Sample(
                                elapsed, ok=False, error=f"HTTP {response.status}: {detail}"
                            )
                        return Sample(elapsed, ok=True)
                except (aiohttp.ClientError, TimeoutError) as exc:
                    elapsed = (time.perf_counter() - started) * 1000
                    return Sample(elapsed, ok=False, error=f"{type(exc).__name__}: {exc}")

        return list(await asyncio.gather(*(one() for _ in range(invocations))))
