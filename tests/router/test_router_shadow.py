"""Shadow traffic through the router process: live calls mirrored after their answer.

The router runs as its own process on a real nats-server; the route is written to
``plnt-routes`` as the promoter writes it while a run is Shadowing (canary at weight 0,
``shadow`` set); stable and canary are real HTTP servers that record what they receive;
pairs are read back from the ``PLNT_SHADOW`` stream and counted.
"""

import asyncio
import time

import aiohttp
from nats.js import JetStreamContext
from shadow_kit import (
    EFFECT,
    SAGA,
    SpawnRouter,
    StartShadowRunner,
    js,
    metric,
    read_pairs,
    routed,
    shadow_entry,
    spawn_router,
    start_shadow_runner,
    stored_pairs,
    write_route,
)

from plnt_common.shadow_pairs import PairKind
from plnt_common.subjects import SHADOW_STREAM

__all__ = ["js", "spawn_router", "start_shadow_runner"]  # fixtures, used by name

WORKFLOW = "default/echo"


async def invoke(http: aiohttp.ClientSession, router: str, n: int) -> dict[str, object]:
    # Bounded: a caller kept waiting by a mirror fails here, fast, rather than hanging.
    timeout = aiohttp.ClientTimeout(total=5)
    async with http.post(
        f"{router}/workflows/echo/invoke", json={"n": n}, timeout=timeout
    ) as response:
        assert response.status == 200, await response.text()
        assert response.headers["x-plnt-revision"] == "stable"
        body: dict[str, object] = await response.json()
        return body


async def test_mirrored_calls_arrive_as_pairs_with_their_kinds_shares_and_both_answers(
    js: JetStreamContext,
    start_shadow_runner: StartShadowRunner,
    spawn_router: SpawnRouter,
    http: aiohttp.ClientSession,
) -> None:
    stable = await start_shadow_runner("stable", cost_usd=0.02)
    canary = await start_shadow_runner("canary", cost_usd=0.05)
    await write_route(js, shadow_entry(stable, canary, percent=50, noise_percent=20))
    router = await spawn_router()
    await routed(http, router, stable)

    for n in range(20):
        assert (await invoke(http, router, n))["revision"] == "stable"

    # Exactly 50 % to the canary (calls 1, 3, ...) and 20 % to the stable again (3, 8, 13, 18).
    pairs = await read_pairs(js, count=14)
    canary_pairs = [p for p in pairs if p.kind is PairKind.CANARY]
    noise_pairs = [p for p in pairs if p.kind is PairKind.NOISE]
    assert len(canary_pairs) == 10 and len(noise_pairs) == 4
    assert len(canary.received) == 10 and all(r.shadow for r in canary.received)
    assert len(stable.live) == 20 and len(stable.mirrored) == 4
    # The live calls chosen for mirroring, and only they, asked the stable for its effects.
    mirrored_ids = {p.pair_id for p in pairs}
    assert len(mirrored_ids) == 12
    assert sum(r.asks_effects for r in stable.live) == 12
    # A call mirrored both ways shares its pair id; both pairs hold its input and answer.
    by_id = {p.pair_id: p for p in canary_pairs}
    shared = [p for p in noise_pairs if p.pair_id in by_id]
    assert len(shared) == 2
    for noise in shared:
        assert noise.input == by_id[noise.pair_id].input
        assert noise.stable == by_id[noise.pair_id].stable
    inputs = sorted(p.input["n"] for p in canary_pairs)
    assert inputs == list(range(0, 20, 2))
    for pair in canary_pairs:
        assert pair.saga_id == SAGA and (pair.namespace, pair.name) == ("default", "echo")
        assert (pair.stable.revision, pair.candidate.revision) == ("stable", "canary")
        assert (pair.stable.status, pair.candidate.status) == (200, 200)
        assert pair.stable.body["output"] == {"echo": pair.input}
        assert pair.candidate.body["revision"] == "canary"
        assert (pair.stable.cost_usd, pair.candidate.cost_usd) == (0.02, 0.05)
        assert pair.stable.effects == pair.candidate.effects == (EFFECT,)
    for pair in noise_pairs:
        assert (pair.stable.revision, pair.candidate.revision) == ("stable", "stable")
    assert (
        await metric(
            http,
            router,
            "plnt_router_shadow_calls_total",
            workflow=WORKFLOW,
            kind="canary",
            outcome="published",
        )
        == 10
    )
    assert (
        await metric(
            http,
            router,
            "plnt_router_shadow_calls_total",
            workflow=WORKFLOW,
            kind="noise",
            outcome="published",
        )
        == 4
    )


async def test_the_caller_gets_the_stable_s_answer_without_waiting_for_a_slow_canary(
    js: JetStreamContext,
    start_shadow_runner: StartShadowRunner,
    spawn_router: SpawnRouter,
    http: aiohttp.ClientSession,
) -> None:
    stable = await start_shadow_runner("stable")
    canary = await start_shadow_runner("canary", delay_s=2.0)
    await write_route(js, shadow_entry(stable, canary, percent=100))
    router = await spawn_router(shadow_workers="5")
    await routed(http, router, stable)

    started = time.monotonic()
    for n in range(5):
        call_started = time.monotonic()
        assert (await invoke(http, router, n))["revision"] == "stable"
        took = time.monotonic() - call_started
        assert took < 1.0, f"call {n} took {took:.2f}s: it waited for the 2 s canary"
    assert time.monotonic() - started < 2.0
    pairs = await read_pairs(js, count=5)
    assert all(p.candidate.latency_ms >= 2000 for p in pairs)
    assert all(p.stable.latency_ms < 1000 for p in pairs)


async def test_a_failing_canary_changes_nothing_for_callers_and_its_failures_are_paired(
    js: JetStreamContext,
    start_shadow_runner: StartShadowRunner,
    spawn_router: SpawnRouter,
    http: aiohttp.ClientSession,
) -> None:
    stable = await start_shadow_runner("stable")
    canary = await start_shadow_runner("canary", status=500)
    await write_route(js, shadow_entry(stable, canary, percent=100))
    router = await spawn_router()
    await routed(http, router, stable)

    answers = [await invoke(http, router, n) for n in range(6)]
    assert [a["output"] for a in answers] == [{"echo": {"n": n}} for n in range(6)]
    pairs = await read_pairs(js, count=6)
    assert [p.candidate.status for p in pairs] == [500] * 6
    assert all(p.candidate.body is None and p.stable.status == 200 for p in pairs)


async def test_a_full_shadow_queue_drops_the_mirror_and_counts_it(
    js: JetStreamContext,
    start_shadow_runner: StartShadowRunner,
    spawn_router: SpawnRouter,
    http: aiohttp.ClientSession,
) -> None:
    stable = await start_shadow_runner("stable")
    canary = await start_shadow_runner("canary", gate=asyncio.Event())
    await write_route(js, shadow_entry(stable, canary, percent=100))
    router = await spawn_router(shadow_workers="1", shadow_queue="1")
    await routed(http, router, stable)

    await invoke(http, router, 0)  # its mirror holds the only worker ...
    deadline = time.monotonic() + 5
    while not canary.received:
        assert time.monotonic() < deadline, "the first mirror never reached the canary"
        await asyncio.sleep(0.02)
    for n in range(1, 6):  # ... the next waits in the queue; the other four find it full
        await invoke(http, router, n)
    assert await metric(http, router, "plnt_router_shadow_dropped_total", reason="queue_full") == 4
    assert (
        await metric(
            http,
            router,
            "plnt_router_shadow_calls_total",
            workflow=WORKFLOW,
            kind="canary",
            outcome="queue_full",
        )
        == 4
    )
    assert canary.gate is not None
    canary.gate.set()
    pairs = await read_pairs(js, count=2)
    assert sorted(p.input["n"] for p in pairs) == [0, 1]
    assert len(canary.received) == 2


async def test_mirroring_stops_for_a_saga_once_its_budget_is_spent(
    js: JetStreamContext,
    start_shadow_runner: StartShadowRunner,
    spawn_router: SpawnRouter,
    http: aiohttp.ClientSession,
) -> None:
    stable = await start_shadow_runner("stable")
    canary = await start_shadow_runner("canary", cost_usd=0.4)
    await write_route(js, shadow_entry(stable, canary, percent=100, budget_usd=1.0))
    router = await spawn_router()
    await routed(http, router, stable)

    for n in range(3):  # 0.4 + 0.4 + 0.4: the third mirror reaches the 1 USD budget
        await invoke(http, router, n)
        await read_pairs(js, count=n + 1)
    for n in range(3, 7):
        await invoke(http, router, n)
    # Mirroring is decided before the live call leaves: these were never mirrored.
    assert [r.asks_effects for r in stable.live] == [True] * 3 + [False] * 4
    assert len(canary.received) == 3
    assert await stored_pairs(js) == 3
    assert (
        await metric(http, router, "plnt_router_shadow_budget_spent_total", workflow=WORKFLOW) == 1
    )


async def test_streamed_and_openai_calls_are_mirrored_as_whole_calls(
    js: JetStreamContext,
    start_shadow_runner: StartShadowRunner,
    spawn_router: SpawnRouter,
    http: aiohttp.ClientSession,
) -> None:
    stable = await start_shadow_runner("stable")
    canary = await start_shadow_runner("canary")
    await write_route(js, shadow_entry(stable, canary, percent=100))
    router = await spawn_router()
    await routed(http, router, stable)

    async with http.post(
        f"{router}/workflows/echo/invoke",
        json={"n": "sse"},
        headers={"Accept": "text/event-stream"},
    ) as response:
        assert response.content_type == "text/event-stream"
        streamed = await response.text()
    assert "event: result" in streamed and '"revision": "stable"' in streamed
    chat = {"model": "echo", "messages": [{"role": "user", "content": "plain"}]}
    async with http.post(f"{router}/v1/chat/completions", json=chat) as response:
        assert response.status == 200
        assert (await response.json())["choices"][0]["message"]["content"] == "hi"
    chat_streamed = {**chat, "messages": [{"role": "user", "content": "streamed"}], "stream": True}
    async with http.post(f"{router}/v1/chat/completions", json=chat_streamed) as response:
        assert "data: [DONE]" in await response.text()

    pairs = {str(p.input): p for p in await read_pairs(js, count=3)}
    assert set(pairs) == {"{'n': 'sse'}", "{'input': 'plain'}", "{'input': 'streamed'}"}
    # The canary got each as one whole JSON call, never a stream.
    assert [r.headers["Accept"] for r in canary.received] == ["application/json"] * 3
    for pair in pairs.values():
        assert pair.stable.status == pair.candidate.status == 200
        assert pair.stable.body["output"] == {"echo": pair.input}
        assert pair.candidate.body["output"] == {"echo": pair.input}
        assert pair.stable.effects == (EFFECT,)


async def test_a_route_without_shadow_mirrors_nothing_and_shadow_turns_on_live(
    js: JetStreamContext,
    start_shadow_runner: StartShadowRunner,
    spawn_router: SpawnRouter,
    http: aiohttp.ClientSession,
) -> None:
    stable = await start_shadow_runner("stable")
    canary = await start_shadow_runner("canary")
    await write_route(js, shadow_entry(stable, canary, percent=100, shadow=False))
    router = await spawn_router()
    await routed(http, router, stable)

    for n in range(5):
        await invoke(http, router, n)
    assert not any(r.asks_effects for r in stable.live)  # decided before each call left
    assert canary.received == []

    await write_route(js, shadow_entry(stable, canary, percent=100))
    deadline = time.monotonic() + 10
    n = 5
    while not stable.live[-1].asks_effects:
        assert time.monotonic() < deadline, "shadow was not turned on by the route update"
        await invoke(http, router, n)
        n += 1
    pairs = await read_pairs(js, count=1)
    assert pairs[0].input == {"n": n - 1}
    assert len(canary.received) == 1


async def test_pairs_the_bus_does_not_take_are_dropped_and_counted_once(
    js: JetStreamContext,
    start_shadow_runner: StartShadowRunner,
    spawn_router: SpawnRouter,
    http: aiohttp.ClientSession,
) -> None:
    stable = await start_shadow_runner("stable")
    canary = await start_shadow_runner("canary")
    await write_route(js, shadow_entry(stable, canary, percent=100))
    await js.delete_stream(SHADOW_STREAM)  # nothing stores plnt.shadow.> any more
    router = await spawn_router(shadow_publish_timeout_s="0.5")
    await routed(http, router, stable)

    for n in range(3):
        await invoke(http, router, n)
    deadline = time.monotonic() + 10
    while (
        dropped := await metric(
            http, router, "plnt_router_shadow_dropped_total", reason="publish_failed"
        )
    ) < 3:
        assert time.monotonic() < deadline, f"{dropped} of 3 lost pairs counted"
        await asyncio.sleep(0.05)
    assert (
        await metric(
            http,
            router,
            "plnt_router_shadow_calls_total",
            workflow=WORKFLOW,
            kind="canary",
            outcome="publish_failed",
        )
        == 3
    )
    assert len(canary.received) == 3  # each mirrored once, never sent again
    assert dropped == 3


async def test_an_answer_too_large_to_keep_is_paired_without_its_body(
    js: JetStreamContext,
    start_shadow_runner: StartShadowRunner,
    spawn_router: SpawnRouter,
    http: aiohttp.ClientSession,
) -> None:
    """The caller gets all 1.5 MB; the pair keeps its status, cost and effects, not the
    body (held in the queue, and more than a NATS message may carry)."""
    stable = await start_shadow_runner("stable", pad_bytes=1_500_000)
    canary = await start_shadow_runner("canary")
    await write_route(js, shadow_entry(stable, canary, percent=100))
    router = await spawn_router()
    await routed(http, router, stable)

    assert len((await invoke(http, router, 0))["pad"]) == 1_500_000
    (pair,) = await read_pairs(js, count=1)
    assert (pair.stable.status, pair.stable.body, pair.stable.effects) == (200, None, (EFFECT,))
    assert pair.candidate.body["revision"] == "canary"
