"""The router against hostile or broken clients, over real sockets: deep JSON, protocol
errors, slow and stalled clients, clients that leave. Every answer is the JSON error shape,
none is a 500, and none holds a connection or a slot longer than its documented bound."""

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
import structlog
from prometheus_client import REGISTRY

from plnt_router.table import RouteTable

Factory = Callable[..., Awaitable[Any]]


async def exchange(
    url: str, *parts: bytes, gap_s: float = 0.0, within_s: float = 5.0
) -> tuple[int, dict[str, Any], float]:
    """Send ``parts`` on a raw connection (``gap_s`` apart), read until the router closes it.

    Returns the status, the JSON body and how long after the first byte the answer ended.
    """
    address = urlsplit(url)
    reader, writer = await asyncio.open_connection(address.hostname, address.port)
    started = time.monotonic()

    async def send() -> None:
        for part in parts:
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(gap_s)

    sender = asyncio.create_task(send())
    try:
        raw = await asyncio.wait_for(reader.read(), within_s)
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        writer.close()
    elapsed = time.monotonic() - started
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), raw[:300]
    document = json.loads(body)
    assert set(document) == {"error"} and set(document["error"]) == {"code", "message"}
    return int(head.split(b" ")[1]), document["error"], elapsed


def invocations(status: int) -> float:
    value = REGISTRY.get_sample_value(
        "plnt_invocations_total",
        {"workflow": "default/echo", "revision": "r1", "status": str(status)},
    )
    unrouted = REGISTRY.get_sample_value(
        "plnt_invocations_total",
        {"workflow": "default/echo", "revision": "", "status": str(status)},
    )
    return (value or 0.0) + (unrouted or 0.0)


@pytest.fixture
async def echo_route(table: RouteTable, start_runner: Factory, make_route: Any) -> Any:
    runner = await start_runner("r1")
    table.put(key="default.echo", entry=make_route("echo", stable=runner))
    return runner


def post(path: str, body: bytes, *, length: int | None = None) -> bytes:
    """A raw POST announcing ``length`` body bytes (default: all of ``body``)."""
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    size = len(body) if length is None else length
    return head.encode() + b"Content-Length: %d\r\n\r\n%s" % (size, body)


async def test_deeply_nested_json_is_422_naming_the_limit_and_never_reaches_the_runner(
    echo_route: Any, start_router: Factory, http: aiohttp.ClientSession
) -> None:
    router = await start_router(max_json_depth=8)
    deep_bodies = [b"[" * 200_000, b'{"a": ' + b"[" * 8 + b"]" * 8 + b"}"]
    for body in deep_bodies:
        for path in ("/workflows/echo/invoke", "/v1/chat/completions"):
            async with http.post(f"{router}{path}", data=body) as response:
                assert response.status == 422, (path, body[:20])
                error = (await response.json())["error"]
                assert error["code"] == "invalid_json"
                assert "deeper than 8 levels" in error["message"]
    assert echo_route.bodies == []
    at_the_limit = {"a": [[[[[[[1]]]]]]]}  # 8 levels
    async with http.post(f"{router}/workflows/echo/invoke", json=at_the_limit) as response:
        assert response.status == 200
    assert echo_route.bodies == [at_the_limit]


@pytest.mark.parametrize(
    ("request_bytes", "code"),
    [
        (
            b"POST /workflows/" + b"n" * 9000 + b"/invoke HTTP/1.1\r\nHost: x\r\n\r\n",
            "line_too_long",
        ),
        (
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"v" * 9000 + b"\r\n\r\n",
            "line_too_long",
        ),
        (
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
            + b"".join(b"X-%d: v\r\n" % i for i in range(200))
            + b"\r\n",
            "too_many_headers",
        ),
        (b"NOT HTTP AT ALL\r\n\r\n", "bad_request"),
    ],
    ids=["over-long-name", "over-long-header", "header-flood", "garbage"],
)
async def test_requests_aiohttp_cannot_parse_get_a_json_400(
    start_router: Factory, request_bytes: bytes, code: str
) -> None:
    router = await start_router()
    with structlog.testing.capture_logs() as logs:
        status, error, _ = await exchange(router, request_bytes)
    assert (status, error["code"]) == (400, code)
    assert all(entry["log_level"] not in ("error", "exception") for entry in logs), logs


async def test_headers_dripping_in_are_cut_off_with_408_at_the_header_timeout(
    start_router: Factory,
) -> None:
    router = await start_router(header_timeout_s=0.5)
    drip = [b"GET /healthz HTTP/1.1\r\n"] + [b"X-Slow: %d\r\n" % i for i in range(40)]
    status, error, elapsed = await exchange(router, *drip, gap_s=0.05)
    assert (status, error["code"]) == (408, "header_timeout")
    assert "0.5s" in error["message"]
    assert 0.45 <= elapsed < 1.0


async def test_a_stalled_body_gets_408_at_the_body_timeout_and_the_runner_is_never_called(
    echo_route: Any, start_router: Factory
) -> None:
    router = await start_router(body_timeout_s=0.5)
    status, error, elapsed = await exchange(
        router, post("/workflows/echo/invoke", b'{"a":', length=100)
    )
    assert (status, error["code"]) == (408, "body_timeout")
    assert 0.45 <= elapsed < 1.0
    assert echo_route.bodies == []


async def test_an_idle_connection_is_closed_after_the_keepalive_timeout(
    start_router: Factory,
) -> None:
    router = await start_router(keepalive_timeout_s=0.3)
    address = urlsplit(router)
    reader, writer = await asyncio.open_connection(address.hostname, address.port)
    started = time.monotonic()
    assert await asyncio.wait_for(reader.read(), 2.0) == b""  # closed without a word
    writer.close()
    assert time.monotonic() - started < 1.0


async def test_a_client_leaving_mid_body_is_a_499_logged_at_debug_not_an_error(
    echo_route: Any, start_router: Factory
) -> None:
    router = await start_router()
    before_499, before_500 = invocations(499), invocations(500)
    address = urlsplit(router)
    with structlog.testing.capture_logs() as logs:
        _, writer = await asyncio.open_connection(address.hostname, address.port)
        writer.write(post("/workflows/echo/invoke", b'{"a":', length=100))
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.close()
        for _ in range(100):
            if invocations(499) > before_499:
                break
            await asyncio.sleep(0.02)
    assert invocations(499) == before_499 + 1
    assert invocations(500) == before_500
    assert [e["event"] for e in logs if e["log_level"] != "debug"] == []
    assert "router.call_cancelled" in [e["event"] for e in logs]


async def test_a_client_leaving_while_the_runner_works_frees_its_slot_at_once(
    table: RouteTable,
    start_runner: Factory,
    make_route: Any,
    start_router: Factory,
    http: aiohttp.ClientSession,
) -> None:
    runner = await start_runner("r1", delay_s=1.0)
    table.put(key="default.echo", entry=make_route("echo", stable=runner))
    router = await start_router(max_in_flight=1, max_queue=0)
    before = invocations(499)
    address = urlsplit(router)
    _, writer = await asyncio.open_connection(address.hostname, address.port)
    writer.write(post("/workflows/echo/invoke", b'{"first": true}'))
    await writer.drain()
    for _ in range(100):
        if runner.bodies:
            break
        await asyncio.sleep(0.02)
    writer.close()  # the first client gives up while its call runs
    await asyncio.sleep(0.1)
    # With the only slot still held, this call would get 429.
    async with http.post(f"{router}/workflows/echo/invoke", json={"second": True}) as response:
        assert response.status == 200
    assert invocations(499) == before + 1


async def test_late_headers_behind_a_slow_call_get_their_408_after_its_answer_intact(
    table: RouteTable, start_runner: Factory, make_route: Any, start_router: Factory
) -> None:
    runner = await start_runner("r1", delay_s=0.8)
    table.put(key="default.echo", entry=make_route("echo", stable=runner))
    router = await start_router(header_timeout_s=0.3)
    address = urlsplit(router)
    reader, writer = await asyncio.open_connection(address.hostname, address.port)
    # A whole call, then (while it runs) the start of a second one that never completes.
    writer.write(post("/workflows/echo/invoke", b'{"slow": true}'))
    await writer.drain()
    await asyncio.sleep(0.1)
    writer.write(b"GET /healthz HTTP/1.1\r\n")
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    first, _, rest = raw.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200 "), raw[:200]
    length = int(
        next(h for h in first.split(b"\r\n") if h.lower().startswith(b"content-length:")).split(
            b":"
        )[1]
    )
    assert json.loads(rest[:length])["output"] == {"slow": True}
    assert rest[length:].startswith(b"HTTP/1.1 408 Request Timeout"), rest[length:][:100]


async def test_an_over_long_name_is_a_404_whose_message_does_not_echo_it_whole(
    start_router: Factory, http: aiohttp.ClientSession
) -> None:
    router = await start_router()
    name = "n" * 5000  # fits in a request line, longer than any workflow name
    async with http.post(f"{router}/workflows/{name}/invoke", json={}) as response:
        assert response.status == 404
        error = (await response.json())["error"]
    assert error["code"] == "workflow_not_found"
    assert "(5000 characters, more than a name may have)" in error["message"]
    assert len(error["message"]) < 200
