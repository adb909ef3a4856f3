"""The route watch on a real nats-server: initial load, live changes, missing bucket, restart."""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js.kv import KeyValue

from plnt_common.bus import connect
from plnt_common.bus.provision import ensure_jetstream
from plnt_common.nats_server import NatsServer
from plnt_common.routes import RouteEntry, RouteTarget, route_key
from plnt_common.subjects import ROUTES_BUCKET
from plnt_router.adapters.route_watch import RouteWatcher
from plnt_router.table import RouteTable
from plnt_testkit.early_marker import MarkFirst

Wait = Callable[..., Awaitable[None]]


def entry(
    name: str, *, revision: str = "1.0.0-g1", weight: int = 0, namespace: str = "default"
) -> RouteEntry:
    return RouteEntry(
        namespace=namespace,
        name=name,
        stable=RouteTarget(revision=revision, url="http://127.0.0.1:9"),
        canary=RouteTarget(revision="canary", url="http://127.0.0.1:10") if weight else None,
        canary_weight=weight,
    )


def revision_of(table: RouteTable, key: str) -> str | None:
    route = table.get(key)
    return route.entry.stable.revision if route and route.entry.stable else None


@pytest.fixture
async def watch(nats_url: str) -> AsyncIterator[Callable[[RouteTable], Awaitable[RouteWatcher]]]:
    """Start ``RouteWatcher``s on their own connection (as the router has); stopped after."""
    started: list[tuple[RouteWatcher, Client]] = []

    async def start(table: RouteTable) -> RouteWatcher:
        nc = await connect(nats_url, name="router-under-test")
        watcher = RouteWatcher(nc=nc, table=table, retry_s=0.1, check_s=0.2)
        watcher.start()
        started.append((watcher, nc))
        return watcher

    yield start
    for watcher, nc in started:
        await watcher.stop()
        await nc.close()


async def test_initial_routes_are_all_loaded_before_the_table_reports_loaded(
    nc: Client, watch: Any, wait_until: Wait
) -> None:
    js = nc.jetstream()
    await ensure_jetstream(js)
    kv = await js.key_value(ROUTES_BUCKET)
    for n in range(20):
        await kv.put(route_key("default", f"wf-{n}"), entry(f"wf-{n}").model_dump_json().encode())
    await kv.delete(route_key("default", "wf-0"))

    table = RouteTable()
    await watch(table)
    await wait_until(lambda: table.loaded, what="table loaded")
    assert len(table) == 19
    assert table.get("default.wf-0") is None
    assert revision_of(table, "default.wf-19") == "1.0.0-g1"


async def test_puts_updates_deletes_and_purges_apply_live(
    nc: Client, watch: Any, wait_until: Wait
) -> None:
    js = nc.jetstream()
    await ensure_jetstream(js)
    kv = await js.key_value(ROUTES_BUCKET)
    table = RouteTable()
    await watch(table)
    await wait_until(lambda: table.loaded, what="empty table loaded")
    assert len(table) == 0

    await kv.put("default.echo", entry("echo").model_dump_json().encode())
    await wait_until(lambda: revision_of(table, "default.echo") == "1.0.0-g1", what="put")

    await kv.put(
        "default.echo", entry("echo", revision="2.0.0-g2", weight=25).model_dump_json().encode()
    )
    await wait_until(lambda: revision_of(table, "default.echo") == "2.0.0-g2", what="update")
    route = table.get("default.echo")
    assert route is not None
    assert route.entry.canary_weight == 25

    await kv.delete("default.echo")
    await wait_until(lambda: table.get("default.echo") is None, what="delete")

    await kv.put("team.x", entry("x", namespace="team").model_dump_json().encode())
    await wait_until(lambda: table.get("team.x") is not None, what="second put")
    await kv.purge("team.x")
    await wait_until(lambda: table.get("team.x") is None, what="purge")


async def test_an_invalid_value_keeps_the_previous_route(
    nc: Client, watch: Any, wait_until: Wait
) -> None:
    js = nc.jetstream()
    await ensure_jetstream(js)
    kv = await js.key_value(ROUTES_BUCKET)
    table = RouteTable()
    await watch(table)
    await kv.put("default.echo", entry("echo").model_dump_json().encode())
    await wait_until(lambda: revision_of(table, "default.echo") == "1.0.0-g1", what="put")

    await kv.put("default.echo", b'{"namespace": "default"}')  # no name: invalid
    await kv.put("default.marker", entry("marker").model_dump_json().encode())
    await wait_until(lambda: table.get("default.marker") is not None, what="marker after bad value")
    assert revision_of(table, "default.echo") == "1.0.0-g1"


async def test_watch_waits_for_the_bucket_to_be_created(
    nc: Client, watch: Any, wait_until: Wait
) -> None:
    table = RouteTable()
    await watch(table)
    await asyncio.sleep(0.5)
    assert not table.loaded

    js = nc.jetstream()
    await ensure_jetstream(js)
    kv = await js.key_value(ROUTES_BUCKET)
    await kv.put("default.late", entry("late").model_dump_json().encode())
    await wait_until(lambda: table.get("default.late") is not None, what="route in a late bucket")
    assert table.loaded


async def test_watch_survives_a_nats_restart_and_keeps_serving_meanwhile(
    nats_server: NatsServer, nc: Client, watch: Any, wait_until: Wait
) -> None:
    js = nc.jetstream()
    await ensure_jetstream(js)
    kv = await js.key_value(ROUTES_BUCKET)
    await kv.put("default.echo", entry("echo").model_dump_json().encode())
    table = RouteTable()
    await watch(table)
    await wait_until(lambda: revision_of(table, "default.echo") == "1.0.0-g1", what="initial")

    nats_server.stop()
    await asyncio.sleep(0.5)
    # The bus is gone: the router keeps the routes it has.
    assert revision_of(table, "default.echo") == "1.0.0-g1"
    nats_server.start()

    async def put_after_reconnect() -> None:
        while True:
            try:
                await kv.put(
                    "default.echo", entry("echo", revision="2.0.0-g2").model_dump_json().encode()
                )
                return
            except Exception:
                await asyncio.sleep(0.2)

    await asyncio.wait_for(put_after_reconnect(), timeout=15)
    await wait_until(
        lambda: revision_of(table, "default.echo") == "2.0.0-g2",
        within_s=15,
        what="update after restart",
    )
    await kv.delete("default.echo")
    await wait_until(lambda: table.get("default.echo") is None, what="delete after restart")


async def test_an_early_end_of_initial_values_never_swaps_in_a_partial_table(
    nc: Client, watch: Any, wait_until: Wait, monkeypatch: pytest.MonkeyPatch
) -> None:
    js = nc.jetstream()
    await ensure_jetstream(js)
    kv = await js.key_value(ROUTES_BUCKET)
    for n in range(5):
        await kv.put(route_key("default", f"wf-{n}"), entry(f"wf-{n}").model_dump_json().encode())
    real_watch = KeyValue.watch

    async def marking_first(self: KeyValue, keys: str, **options: Any) -> MarkFirst:
        return MarkFirst(await real_watch(self, keys, **options))

    monkeypatch.setattr(KeyValue, "watch", marking_first)
    table = RouteTable()
    swaps: list[int] = []
    replace_all = table.replace_all

    def recording(entries: Any) -> None:
        swaps.append(len(entries))
        replace_all(entries)

    monkeypatch.setattr(table, "replace_all", recording)
    await watch(table)
    await wait_until(lambda: table.loaded, what="table loaded")
    assert swaps == [5]
