"""The router's live figures: what a runner's spend headers add, and what the totals read
off the router's own counters hold (a real router app on a real socket, real runners)."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web
from conftest import FakeRunner

from plnt_common.figures import RevisionTotals
from plnt_router.app import INVOCATION_METRICS, app_runner, create_app
from plnt_router.live_figures import SERIES_PER_TURN, LiveTotals
from plnt_router.metrics import InvocationMetrics
from plnt_router.settings import RouterSettings


def spending_runner_app(
    runner: FakeRunner, *, tokens: str, cost: str, status: int
) -> web.Application:
    async def invoke(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(
            {"revision": runner.revision},
            status=status,
            headers={
                "x-plnt-revision": runner.revision,
                "x-plnt-tokens": tokens,
                "x-plnt-cost-usd": cost,
            },
        )

    app = web.Application()
    app.router.add_post("/invoke", invoke)
    return app


async def test_spend_headers_and_statuses_make_the_totals_of_each_revision(
    start_app: Callable[..., Awaitable[str]],
    table: Any,
    make_route: Callable[..., Any],
    http: aiohttp.ClientSession,
) -> None:
    stable, canary = FakeRunner("lf-stable"), FakeRunner("lf-canary")
    stable.url = await start_app(
        spending_runner_app(stable, tokens="30,12", cost="0.0002", status=200)
    )
    canary.url = await start_app(spending_runner_app(canary, tokens="7,oops", cost="1", status=503))
    entry = make_route("live-figures", stable=stable, canary=canary, weight=50)
    table.put(key="default.live-figures", entry=entry)
    settings = RouterSettings(port=0, shutdown_grace_s=1.0, auth="none")
    app = create_app(settings=settings, table=table)
    router = await start_app(app, runner=app_runner(app, settings=settings))
    statuses = []
    for _ in range(4):
        async with http.post(f"{router}/workflows/live-figures/invoke", json={}) as response:
            statuses.append(response.status)
    assert sorted(statuses) == [200, 200, 503, 503], "a bad spend header spoils no answer"
    async with http.post(f"{router}/workflows/not-deployed/invoke", json={}) as response:
        assert response.status == 404

    live = LiveTotals(app[INVOCATION_METRICS])
    every = await live.collect()
    totals = every[("default", "live-figures")]
    assert set(totals) == {"lf-stable", "lf-canary"}
    assert totals["lf-stable"].model_copy(update={"latency_buckets": ()}) == RevisionTotals(
        invocations=2, errors=0, tokens=84, cost_usd=0.0004
    )
    # A malformed tokens header adds nothing; the 503 still counts, as an error.
    assert totals["lf-canary"].model_copy(update={"latency_buckets": ()}) == RevisionTotals(
        invocations=2, errors=2, tokens=0, cost_usd=0.0
    )
    assert dict(totals["lf-stable"].latency_buckets)[float("inf")] == 2
    assert list(every) == [("default", "live-figures")], "the 404 belongs to no workflow"


async def test_a_second_reading_sees_the_calls_since_the_first_and_a_4xx_is_no_error(
    start_app: Callable[..., Awaitable[str]],
    table: Any,
    make_route: Callable[..., Any],
    http: aiohttp.ClientSession,
) -> None:
    stable = FakeRunner("lf-again")
    stable.url = await start_app(spending_runner_app(stable, tokens="1,1", cost="0", status=422))
    table.put(key="default.lf-again", entry=make_route("lf-again", stable=stable))
    settings = RouterSettings(port=0, shutdown_grace_s=1.0, auth="none")
    app = create_app(settings=settings, table=table)
    router = await start_app(app, runner=app_runner(app, settings=settings))
    live = LiveTotals(app[INVOCATION_METRICS])

    async def calls(count: int) -> RevisionTotals:
        for _ in range(count):
            async with http.post(f"{router}/workflows/lf-again/invoke", json={}) as response:
                assert response.status == 422
        return (await live.collect())[("default", "lf-again")]["lf-again"]

    first = await calls(1)
    assert (first.invocations, dict(first.latency_buckets)[float("inf")]) == (1, 1)
    second = await calls(2)
    assert (second.invocations, dict(second.latency_buckets)[float("inf")]) == (3, 3)
    assert (second.tokens, second.errors) == (6, 0)


async def test_reading_many_series_lets_calls_through_every_few_series() -> None:
    metrics = InvocationMetrics()
    for n in range(3 * SERIES_PER_TURN):
        metrics.observe(workflow=f"default/lf-many-{n}", revision="r1", status=200, seconds=0.01)
    live = LiveTotals(metrics)
    turns = 0
    reading = asyncio.ensure_future(live.collect())
    while not reading.done():
        turns += 1  # another task on the loop (a call) got a turn during the reading
        await asyncio.sleep(0)
    assert len(await reading) == 3 * SERIES_PER_TURN
    assert turns >= 3
