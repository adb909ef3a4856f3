"""A promotion or rollback written to ``plnt-routes`` while calls stream in loses no call."""

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from nats.aio.client import Client

from plnt_common.bus import connect
from plnt_common.bus.provision import ensure_jetstream
from plnt_common.routes import RouteEntry, RouteTarget
from plnt_common.subjects import ROUTES_BUCKET
from plnt_router.adapters.route_watch import RouteWatcher
from plnt_router.app import create_app
from plnt_router.settings import RouterSettings
from plnt_router.table import RouteTable

StartApp = Callable[[web.Application], Awaitable[str]]
Wait = Callable[..., Awaitable[None]]


@pytest.fixture
async def watched_table(nats_url: str) -> AsyncIterator[RouteTable]:
    table = RouteTable()
    nc = await connect(nats_url, name="router-under-test")
    watcher = RouteWatcher(nc=nc, table=table, retry_s=0.1, check_s=0.2)
    watcher.start()
    yield table
    await watcher.stop()
    await nc.close()


@pytest.fixture
async def start_runner() -> AsyncIterator[Callable[[str], Awaitable[tuple[str, web.AppRunner]]]]:
    """Runners that take 20 ms per call, each stoppable on its own (graceful, like a pod)."""
    runners: list[web.AppRunner] = []

    async def start(revision: str) -> tuple[str, web.AppRunner]:
        async def invoke(request: web.Request) -> web.Response:
            body = await request.json()
            await asyncio.sleep(0.02)
            return web.json_response({"output": body}, headers={"x-plnt-revision": revision})

        app = web.Application()
        app.router.add_post("/invoke", invoke)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=5.0)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}", runner

    yield start
    for runner in runners:
        await runner.cleanup()  # a no-op for a runner the test already retired


@pytest.mark.parametrize("outcome", ["promotion", "rollback"])
async def test_route_switch_under_concurrent_calls_loses_no_accepted_call(
    outcome: str,
    nc: Client,
    watched_table: RouteTable,
    start_app: StartApp,
    start_runner: Callable[[str], Awaitable[tuple[str, web.AppRunner]]],
    http: aiohttp.ClientSession,
    wait_until: Wait,
) -> None:
    js = nc.jetstream()
    await ensure_jetstream(js)
    kv = await js.key_value(ROUTES_BUCKET)
    stable_url, stable_runner = await start_runner("1.0.0-g1")
    canary_url, canary_runner = await start_runner("1.1.0-g2")
    stable = RouteTarget(revision="1.0.0-g1", url=stable_url)
    canary = RouteTarget(revision="1.1.0-g2", url=canary_url)

    async def put(**targets: Any) -> None:
        entry = RouteEntry(namespace="default", name="echo", **targets)
        await kv.put("default.echo", entry.model_dump_json().encode())

    await put(stable=stable, canary=canary, canary_weight=50)
    await wait_until(lambda: watched_table.get("default.echo") is not None, what="canary route")
    settings = RouterSettings(port=0, auth="none")
    router = await start_app(create_app(settings=settings, table=watched_table))

    loop = asyncio.get_running_loop()
    # (time the call was sent, revision that served it) for every successful call
    served: list[tuple[float, str]] = []
    failures: list[str] = []
    stop = asyncio.Event()

    async def client(worker: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            sent = loop.time()
            try:
                async with http.post(
                    f"{router}/workflows/echo/invoke", json={"worker": worker, "n": n}
                ) as response:
                    body = await response.read()
                    if response.status != 200:
                        failures.append(f"{response.status} {body[:200]!r}")
                    else:
                        served.append((sent, response.headers["x-plnt-revision"]))
            except aiohttp.ClientError as exc:
                failures.append(repr(exc))

    clients = [asyncio.create_task(client(w)) for w in range(16)]
    await asyncio.sleep(0.5)
    assert Counter(revision for _, revision in served) == {
        "1.0.0-g1": pytest.approx(len(served) / 2, abs=16),
        "1.1.0-g2": pytest.approx(len(served) / 2, abs=16),
    }

    if outcome == "promotion":
        survivor, retired_runner = "1.1.0-g2", stable_runner
        await put(stable=canary)
    else:
        survivor, retired_runner = "1.0.0-g1", canary_runner
        await put(stable=stable, canary=canary, canary_weight=0)

    def switched() -> bool:
        route = watched_table.get("default.echo")
        return route is not None and route.entry.canary_weight == 0

    await wait_until(switched, what="switched route")
    switched_at = loop.time()
    # Retire the old runner the way the installer does: after the route moved, gracefully.
    await retired_runner.cleanup()
    await asyncio.sleep(0.5)
    stop.set()
    await asyncio.gather(*clients)

    assert failures == []
    after_switch = Counter(revision for sent, revision in served if sent > switched_at)
    assert set(after_switch) == {survivor}
    assert after_switch[survivor] > 50
