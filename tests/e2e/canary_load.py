"""Live load for stepped-canary tests: calls through the router, and an upstream that fails
every input but the smoke test's."""

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from plnt_common.nats_server import free_port

LIVE_BODY = {"review": "Lovely food, rude waiter", "brand_voice": "warm, concise"}
"""What the load sends: unlike the smoke payload, it never mentions parking."""
CALL_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Call:
    started: float
    ended: float
    status: int
    revision: str


@dataclass
class Load:
    """``concurrency`` callers POSTing ``body`` to ``url`` until stopped."""

    url: str
    body: dict[str, Any] = field(default_factory=lambda: dict(LIVE_BODY))
    concurrency: int = 4
    pause_s: float = 0.001  # a breath per call: the callers share the test's event loop
    calls: list[Call] = field(default_factory=list)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator["Load"]:
        stop = asyncio.Event()
        timeout = aiohttp.ClientTimeout(total=CALL_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            workers = [
                asyncio.create_task(self._call_until(http, stop)) for _ in range(self.concurrency)
            ]
            try:
                yield self
            finally:
                stop.set()
                await asyncio.gather(*workers)

    async def _call_until(self, http: aiohttp.ClientSession, stop: asyncio.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                async with http.post(self.url, json=self.body) as response:
                    await response.read()
                    status = response.status
                    revision = response.headers.get("x-plnt-revision", "")
            except (aiohttp.ClientError, TimeoutError):
                status, revision = 0, ""
            self.calls.append(Call(started, time.monotonic(), status, revision))
            if self.pause_s:
                await asyncio.sleep(self.pause_s)

    def between(self, start: float, end: float) -> list[Call]:
        return [c for c in self.calls if c.started >= start and c.ended <= end]


@contextlib.asynccontextmanager
async def parking_only_upstream() -> AsyncIterator[str]:
    """A real HTTP endpoint that answers 200 only for a body that mentions parking."""

    async def answer(request: web.Request) -> web.Response:
        text = json.dumps(await request.json())
        if "parking" in text:
            return web.json_response({"ok": True})
        return web.json_response({"error": "cannot handle this review"}, status=500)

    app = web.Application()
    app.router.add_post("/", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()
