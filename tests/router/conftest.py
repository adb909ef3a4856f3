"""Fixtures for the router tests: real aiohttp runners and routers on free loopback ports.

Nothing is mocked: "runners" are small aiohttp apps speaking the runner's HTTP contract
(``POST /invoke`` answering JSON with ``x-plnt-revision``), the router is the real app
on a real socket, and the route-watch tests use the shared real nats-server fixture.
"""

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from plnt_common.routes import RouteEntry, RouteTarget
from plnt_router.app import app_runner, create_app
from plnt_router.settings import RouterSettings
from plnt_router.table import RouteTable

StartApp = Callable[..., Awaitable[str]]


@dataclass
class FakeRunner:
    """A runner serving one revision; records every body it was sent."""

    revision: str
    url: str = ""
    bodies: list[Any] = field(default_factory=list)

    def target(self) -> RouteTarget:
        return RouteTarget(revision=self.revision, url=self.url)


def echo_runner_app(runner: FakeRunner, *, delay_s: float = 0.0) -> web.Application:
    """``POST /invoke`` -> ``{"output": <input>, "reply": "...", "revision": ...}``."""

    async def invoke(request: web.Request) -> web.Response:
        body = await request.json()
        runner.bodies.append(body)
        if delay_s:
            await asyncio.sleep(delay_s)
        return web.json_response(
            {"output": body, "reply": f"echo from {runner.revision}", "revision": runner.revision},
            headers={"x-plnt-revision": runner.revision},
        )

    app = web.Application()
    app.router.add_post("/invoke", invoke)
    return app


@pytest.fixture
async def start_app() -> AsyncIterator[StartApp]:
    """Serve aiohttp apps on 127.0.0.1 with a kernel-chosen port; returns the base URL.

    ``runner`` serves the app through a given ``web.AppRunner`` (the router's own)."""
    runners: list[web.AppRunner] = []

    async def start(app: web.Application, *, runner: web.AppRunner | None = None) -> str:
        runner = runner or web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    yield start
    for runner in reversed(runners):
        await runner.cleanup()


@pytest.fixture
def start_runner(start_app: StartApp) -> Callable[..., Awaitable[FakeRunner]]:
    """Start an echo runner for ``revision``; ``delay_s`` slows every answer."""

    async def start(revision: str, *, delay_s: float = 0.0) -> FakeRunner:
        runner = FakeRunner(revision=revision)
        runner.url = await start_app(echo_runner_app(runner, delay_s=delay_s))
        return runner

    return start


@pytest.fixture
def table() -> RouteTable:
    """A table already marked loaded, filled by hand with ``table.put``."""
    table = RouteTable()
    table.replace_all({})
    return table


@pytest.fixture
def start_router(start_app: StartApp, table: RouteTable) -> Callable[..., Awaitable[str]]:
    """Start the real router app, served as ``serve`` does, over ``table``; keyword
    arguments override settings."""

    async def start(**overrides: Any) -> str:
        defaults: dict[str, Any] = {"port": 0, "shutdown_grace_s": 1.0, "auth": "none"}
        settings = RouterSettings(**{**defaults, **overrides})
        app = create_app(settings=settings, table=table)
        return await start_app(app, runner=app_runner(app, settings=settings))

    return start


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def route(
    name: str,
    *,
    namespace: str = "default",
    stable: FakeRunner | None = None,
    canary: FakeRunner | None = None,
    weight: int = 0,
) -> RouteEntry:
    return RouteEntry(
        namespace=namespace,
        name=name,
        stable=stable.target() if stable else None,
        canary=canary.target() if canary else None,
        canary_weight=weight,
    )


@pytest.fixture
def make_route() -> Callable[..., RouteEntry]:
    """``make_route(name, namespace=, stable=FakeRunner, canary=FakeRunner, weight=)``."""
    return route


async def eventually(
    check: Callable[[], bool], *, within_s: float = 5.0, what: str = "condition"
) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {within_s}s")
        await asyncio.sleep(0.02)


@pytest.fixture
def wait_until() -> Callable[..., Awaitable[None]]:
    """``await wait_until(lambda: ..., within_s=5, what="...")`` polls until true."""
    return eventually


async def error_of(response: aiohttp.ClientResponse) -> dict[str, str]:
    """The router's JSON error object, asserting the documented shape on the way."""
    assert response.content_type == "application/json"
    body = json.loads(await response.read())
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    return dict(body["error"])


@pytest.fixture
def read_error() -> Callable[[aiohttp.ClientResponse], Awaitable[dict[str, str]]]:
    return error_of
