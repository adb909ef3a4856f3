"""The invoke endpoints over real sockets: proxying, every documented error, limits and auth."""

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from plnt_common.nats_server import free_port
from plnt_common.routes import RouteEntry, RouteTarget
from plnt_router.app import create_app
from plnt_router.settings import RouterSettings
from plnt_router.table import RouteTable

Factory = Callable[..., Awaitable[Any]]
ReadError = Callable[[aiohttp.ClientResponse], Awaitable[dict[str, str]]]


def stable_only(url: str, revision: str = "r1") -> RouteEntry:
    return RouteEntry(
        namespace="default", name="echo", stable=RouteTarget(revision=revision, url=url)
    )


async def test_invoke_is_proxied_to_the_stable_runner_with_its_revision(
    table: RouteTable,
    start_runner: Factory,
    start_router: Factory,
    make_route: Any,
    http: aiohttp.ClientSession,
) -> None:
    runner = await start_runner("1.2.0-g1")
    table.put(key="default.echo", entry=make_route("echo", stable=runner))
    router = await start_router()

    payload = {"review": "Great service but slow parking", "brand_voice": "warm"}
    async with http.post(f"{router}/workflows/echo/invoke", json=payload) as response:
        assert response.status == 200
        assert response.headers["x-plnt-revision"] == "1.2.0-g1"
        body = await response.json()
    assert body["output"] == payload
    assert runner.bodies == [payload]


async def test_namespaced_route_reaches_the_namespace_s_runner_only(
    table: RouteTable,
    start_runner: Factory,
    start_router: Factory,
    make_route: Any,
    http: aiohttp.ClientSession,
) -> None:
    default_runner = await start_runner("d-1")
    team_runner = await start_runner("t-1")
    table.put(key="default.echo", entry=make_route("echo", stable=default_runner))
    table.put(key="team-a.echo", entry=make_route("echo", namespace="team-a", stable=team_runner))
    router = await start_router()

    async with http.post(f"{router}/namespaces/team-a/workflows/echo/invoke", json={"n": 1}) as r:
        assert r.status == 200
        assert r.headers["x-plnt-revision"] == "t-1"
    async with http.post(f"{router}/namespaces/default/workflows/echo/invoke", json={"n": 2}) as r:
        assert r.headers["x-plnt-revision"] == "d-1"
    assert team_runner.bodies == [{"n": 1}]
    assert default_runner.bodies == [{"n": 2}]


async def test_runner_status_and_json_error_body_pass_through_unchanged(
    table: RouteTable, start_app: Factory, start_router: Factory, http: aiohttp.ClientSession
) -> None:
    async def invoke(request: web.Request) -> web.Response:
        return web.json_response({"error": {"code": "step_failed", "message": "boom"}}, status=500)

    app = web.Application()
    app.router.add_post("/invoke", invoke)
    url = await start_app(app)
    table.put(key="default.echo", entry=stable_only(url))
    router = await start_router()
    async with http.post(f"{router}/workflows/echo/invoke", json={}) as response:
        assert response.status == 500
        assert response.headers["x-plnt-revision"] == "r1"
        assert await response.json() == {"error": {"code": "step_failed", "message": "boom"}}


async def test_unknown_workflow_is_404_naming_it(
    start_router: Factory, http: aiohttp.ClientSession, read_error: ReadError
) -> None:
    router = await start_router()
    async with http.post(f"{router}/workflows/nope/invoke", json={}) as response:
        assert response.status == 404
        error = await read_error(response)
    assert error["code"] == "workflow_not_found"
    assert "'nope'" in error["message"]
    assert "'default'" in error["message"]


async def test_workflow_without_ready_revision_is_503(
    table: RouteTable,
    start_runner: Factory,
    start_router: Factory,
    make_route: Any,
    http: aiohttp.ClientSession,
    read_error: ReadError,
) -> None:
    canary = await start_runner("c-1")
    table.put(key="default.echo", entry=make_route("echo", canary=canary, weight=0))
    router = await start_router()
    async with http.post(f"{router}/workflows/echo/invoke", json={}) as response:
        assert response.status == 503
        assert response.headers["Retry-After"] == "1"
        error = await read_error(response)
    assert error["code"] == "workflow_not_ready"
    assert "'echo'" in error["message"]
    assert canary.bodies == []

    assert "no ready revision yet" in error["message"]


async def test_a_route_whose_runner_is_down_says_so_in_its_503(
    table: RouteTable,
    start_runner: Factory,
    start_router: Factory,
    make_route: Any,
    http: aiohttp.ClientSession,
    read_error: ReadError,
) -> None:
    stable = await start_runner("s-1")
    entry = make_route("echo", stable=stable)
    down = entry.model_copy(update={"stable": entry.stable.model_copy(update={"serving": False})})
    table.put(key="default.echo", entry=down)
    router = await start_router()
    async with http.post(f"{router}/workflows/echo/invoke", json={}) as response:
        assert response.status == 503
        error = await read_error(response)
    assert error["code"] == "workflow_not_ready"
    assert "no routed runner is serving (the backend is restarting it)" in error["message"]
    table.put(key="default.echo", entry=entry)
    async with http.post(f"{router}/workflows/echo/invoke", json={}) as response:
        assert response.status == 200
    assert len(stable.bodies) == 1


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_body_over_the_limit_is_413(
    chunked: bool,
    table: RouteTable,
    start_runner: Factory,
    start_router: Factory,
    make_route: Any,
    http: aiohttp.ClientSession,
    read_error: ReadError,
) -> None:
    runner = await start_runner("1")
    table.put(key="default.echo", entry=make_route("echo", stable=runner))
    router = await start_router(max_body_bytes=1024)
    body = json.dumps({"x": "y" * 2000}).encode()

    async def chunks() -> Any:
        yield body[:600]
        yield body[600:]

    data: Any = chunks() if chunked else body
    async with http.post(
        f"{router}/workflows/echo/invoke", data=data, headers={"Content-Type": "application/json"}
    ) as response:
        assert response.status == 413
        error = await read_error(response)
    assert error["code"] == "body_too_large"
    assert "1024" in error["message"]
    assert runner.bodies == []


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "not an array"),
        (b"", "not valid JSON"),
        (b'"x"', "not a string"),
    ],
    ids=["malformed", "array", "empty", "string"],
)
async def test_bad_json_or_non_object_is_422(
    body: bytes,
    fragment: str,
    table: RouteTable,
    start_runner: Factory,
    start_router: Factory,
    make_route: Any,
    http: aiohttp.ClientSession,
    read_error: ReadError,
) -> None:
    runner = await start_runner("1")
    table.put(key="default.echo", entry=make_route("echo", stable=runner))
    router = await start_router()
    async with http.post(f"{router}/workflows/echo/invoke", data=body) as response:
        assert response.status == 422
        error = await read_error(response)
    assert error["code"] == "invalid_json"
    assert fragment in error["message"]
    assert runner.bodies == []


async def test_calls_beyond_in_flight_and_queue_get_429_with_retry_after(
    table: RouteTable,
    start_runner: Factory,
    start_router: Factory,
    make_route: Any,
    http: aiohttp.ClientSession,
    read_error: ReadError,
) -> None:
    runner = await start_runner("1", delay_s=0.5)
    table.put(key="default.echo", entry=make_route("echo", stable=runner))
    router = await start_router(max_in_flight=1, max_queue=1, retry_after_s=3)
    url = f"{router}/workflows/echo/invoke"

    async def call(n: int) -> int:
        async with http.post(url, json={"n": n}) as response:
            return response.status

    in_flight = asyncio.create_task(call(1))
    await asyncio.sleep(0.1)
    queued = asyncio.create_task(call(2))
    await asyncio.sleep(0.1)
    async with http.get(f"{router}/metrics") as response:
        assert 'plnt_queue_depth{component="router"} 1.0' in await response.text()
    async with http.post(url, json={"n": 3}) as response:
        assert response.status == 429
        assert response.headers["Retry-After"] == "3"
        error = await read_error(response)
    assert error["code"] == "over_limit"
    assert await in_flight == 200
    assert await queued == 200
    assert [b["n"] for b in runner.bodies] == [1, 2]


async def test_unreachable_runner_is_502(
    table: RouteTable, start_router: Factory, http: aiohttp.ClientSession, read_error: ReadError
) -> None:
    table.put(key="default.echo", entry=stable_only(f"http://127.0.0.1:{free_port()}", "gone-1"))
    router = await start_router()
    async with http.post(f"{router}/workflows/echo/invoke", json={}) as response:
        assert response.status == 502
        assert response.headers["x-plnt-revision"] == "gone-1"
        error = await read_error(response)
    assert error["code"] == "upstream_unavailable"
    assert "gone-1" in error["message"]


async def test_runner_dropping_the_connection_mid_call_is_502(
    table: RouteTable,
    start_app: Factory,
    start_router: Factory,
    http: aiohttp.ClientSession,
    read_error: ReadError,
) -> None:
    async def invoke(request: web.Request) -> web.Response:
        await request.read()
        assert request.transport is not None
        request.transport.abort()  # RST instead of an answer
        await asyncio.sleep(1)
        return web.Response()

    app = web.Application()
    app.router.add_post("/invoke", invoke)
    url = await start_app(app)
    table.put(key="default.echo", entry=stable_only(url))
    router = await start_router()
    async with http.post(f"{router}/workflows/echo/invoke", json={}) as response:
        assert response.status == 502
        error = await read_error(response)
    assert error["code"] == "upstream_unavailable"


async def test_slow_runner_is_504_after_the_upstream_timeout(
    table: RouteTable,
    start_runner: Factory,
    start_router: Factory,
    make_route: Any,
    http: aiohttp.ClientSession,
    read_error: ReadError,
) -> None:
    runner = await start_runner("slow-1", delay_s=2.0)
    table.put(key="default.echo", entry=make_route("echo", stable=runner))
    router = await start_router(upstream_timeout_s=0.3)
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with http.post(f"{router}/workflows/echo/invoke", json={}) as response:
        assert response.status == 504
        error = await read_error(response)
    assert loop.time() - started < 1.5
    assert error["code"] == "upstream_timeout"
    assert "0.3s" in error["message"]


async def test_refused_connection_falls_back_to_the_other_ready_revision(
    table: RouteTable, start_runner: Factory, start_router: Factory, http: aiohttp.ClientSession
) -> None:
    canary = await start_runner("c-1")
    dead = RouteTarget(revision="s-1", url=f"http://127.0.0.1:{free_port()}")
    table.put(
        key="default.echo",
        entry=RouteEntry(
            namespace="default", name="echo", stable=dead, canary=canary.target(), canary_weight=50
        ),
    )
    router = await start_router()
    revisions = []
    for n in range(6):
        async with http.post(f"{router}/workflows/echo/invoke", json={"n": n}) as response:
            assert response.status == 200
            revisions.append(response.headers["x-plnt-revision"])
    assert set(revisions) == {"c-1"}
    assert len(canary.bodies) == 6


async def test_api_key_guards_only_the_namespaces_it_lists(
    table: RouteTable,
    start_runner: Factory,
    start_router: Factory,
    make_route: Any,
    http: aiohttp.ClientSession,
    read_error: ReadError,
) -> None:
    runner = await start_runner("1")
    table.put(key="default.echo", entry=make_route("echo", stable=runner))
    table.put(key="open.echo", entry=make_route("echo", namespace="open", stable=runner))
    router = await start_router(api_keys={"default": "s3cret"})
    url = f"{router}/workflows/echo/invoke"

    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"}):
        async with http.post(url, json={}, headers=headers) as response:
            assert response.status == 401
            assert response.headers["WWW-Authenticate"] == "Bearer"
            error = await read_error(response)
            assert error["code"] == "unauthorized"
            assert "'default'" in error["message"]
    async with http.post(url, json={}, headers={"Authorization": "Bearer s3cret"}) as response:
        assert response.status == 200
    async with http.post(f"{router}/namespaces/open/workflows/echo/invoke", json={}) as response:
        assert response.status == 200
    assert len(runner.bodies) == 2


async def test_invocations_are_counted_by_workflow_revision_and_status(
    table: RouteTable,
    start_runner: Factory,
    start_router: Factory,
    make_route: Any,
    http: aiohttp.ClientSession,
) -> None:
    runner = await start_runner("m-7")
    table.put(
        key="metrics-ns.counted", entry=make_route("counted", namespace="metrics-ns", stable=runner)
    )
    router = await start_router()
    for _ in range(3):
        async with http.post(f"{router}/namespaces/metrics-ns/workflows/counted/invoke", json={}):
            pass
    async with http.get(f"{router}/metrics") as response:
        assert response.status == 200
        text = await response.text()
    labels = '{revision="m-7",status="200",workflow="metrics-ns/counted"}'
    assert f"plnt_invocations_total{labels} 3.0" in text
    assert f"plnt_invocation_duration_seconds_count{labels} 3.0" in text


async def test_healthz_is_always_200_and_readyz_waits_for_the_table(
    start_app: Factory, http: aiohttp.ClientSession, read_error: ReadError
) -> None:
    table = RouteTable()
    router = await start_app(create_app(settings=RouterSettings(port=0, auth="none"), table=table))
    async with http.get(f"{router}/healthz") as response:
        assert response.status == 200
    async with http.get(f"{router}/readyz") as response:
        assert response.status == 503
        assert (await read_error(response))["code"] == "not_ready"
    table.replace_all({})
    async with http.get(f"{router}/readyz") as response:
        assert response.status == 200


async def test_unknown_paths_and_methods_get_the_json_error_shape(
    start_router: Factory, http: aiohttp.ClientSession, read_error: ReadError
) -> None:
    router = await start_router()
    async with http.get(f"{router}/nowhere") as response:
        assert response.status == 404
        assert (await read_error(response))["code"] == "not_found"
    async with http.get(f"{router}/workflows/echo/invoke") as response:
        assert response.status == 405
        assert response.headers["Allow"] == "POST"
        error = await read_error(response)
    assert error["code"] == "method_not_allowed"
    assert "GET /workflows/echo/invoke" in error["message"]


async def test_with_auth_keys_a_namespace_without_a_key_is_refused_too(
    table: RouteTable,
    start_runner: Factory,
    start_router: Factory,
    make_route: Any,
    http: aiohttp.ClientSession,
) -> None:
    runner = await start_runner("1")
    table.put(key="default.echo", entry=make_route("echo", stable=runner))
    table.put(key="team-b.echo", entry=make_route("echo", namespace="team-b", stable=runner))
    router = await start_router(auth="keys", api_keys={"default": "s3cret"})

    unlisted = f"{router}/namespaces/team-b/workflows/echo/invoke"
    async with http.post(unlisted, json={}) as response:
        assert response.status == 401
    async with http.post(
        f"{router}/workflows/echo/invoke", json={}, headers={"Authorization": "Bearer s3cret"}
    ) as response:
        assert response.status == 200
    assert len(runner.bodies) == 1


async def test_with_a_metrics_port_the_public_port_serves_no_metrics(
    start_router: Factory, http: aiohttp.ClientSession
) -> None:
    router = await start_router(metrics_port=free_port())
    async with http.get(f"{router}/metrics") as response:
        assert response.status == 404
    async with http.get(f"{router}/healthz") as response:
        assert response.status == 200


async def test_a_call_a_draining_runner_refused_goes_where_the_route_points_now(
    table: RouteTable,
    start_app: Factory,
    start_runner: Factory,
    start_router: Factory,
    http: aiohttp.ClientSession,
) -> None:
    """A rollback moves the route while a call is on its way to the runner it retires: the
    runner answers 503 x-plnt-draining (it did not run the call) and the router sends the
    call, once, where the route points by then; the caller never sees the 503."""
    previous = await start_runner("s-1")
    refused: list[bytes] = []

    async def draining(request: web.Request) -> web.Response:
        refused.append(await request.read())
        table.put(key="default.echo", entry=stable_only(previous.target().url, "s-1"))
        return web.json_response(
            {"error": "the runner is shutting down", "reason": "ShuttingDown", "status": 503},
            status=503,
            headers={"x-plnt-draining": "1"},
        )

    app = web.Application()
    app.router.add_post("/invoke", draining)
    retiring = await start_app(app)
    table.put(key="default.echo", entry=stable_only(retiring, "n-2"))
    router = await start_router()
    async with http.post(f"{router}/workflows/echo/invoke", json={"n": 1}) as response:
        assert response.status == 200
        assert response.headers["x-plnt-revision"] == "s-1"
    assert len(refused) == 1
    assert previous.bodies == [{"n": 1}]


async def test_a_draining_runner_s_503_passes_through_when_the_route_has_nowhere_else(
    table: RouteTable, start_app: Factory, start_router: Factory, http: aiohttp.ClientSession
) -> None:
    calls: list[int] = []

    async def draining(request: web.Request) -> web.Response:
        calls.append(1)
        return web.json_response(
            {"error": "the runner is shutting down", "reason": "ShuttingDown", "status": 503},
            status=503,
            headers={"x-plnt-draining": "1"},
        )

    app = web.Application()
    app.router.add_post("/invoke", draining)
    table.put(key="default.echo", entry=stable_only(await start_app(app)))
    router = await start_router()
    async with http.post(f"{router}/workflows/echo/invoke", json={}) as response:
        assert response.status == 503
        assert (await response.json())["reason"] == "ShuttingDown"
    assert calls == [1]
