"""SSE pass-through: chunks reach the client as the runner sends them, failures end in-band."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from plnt_common.routes import RouteEntry, RouteTarget
from plnt_router.table import RouteTable

Factory = Callable[..., Awaitable[Any]]
SSE = {"Accept": "text/event-stream"}


def route_to(url: str, revision: str = "sse-1") -> RouteEntry:
    return RouteEntry(
        namespace="default", name="stream", stable=RouteTarget(revision=revision, url=url)
    )


async def test_first_chunk_reaches_the_client_before_the_runner_sends_the_second(
    table: RouteTable, start_app: Factory, start_router: Factory, http: aiohttp.ClientSession
) -> None:
    first_seen = asyncio.Event()
    second_sent = False
    accept_seen: list[str] = []

    async def invoke(request: web.Request) -> web.StreamResponse:
        nonlocal second_sent
        accept_seen.append(request.headers.get("Accept", ""))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"step": "one"}\n\n')
        # The runner holds the second chunk until the client has the first: a router that
        # buffered the stream would deadlock here and the test would time out.
        await asyncio.wait_for(first_seen.wait(), timeout=5)
        await asyncio.sleep(0.05)
        second_sent = True
        await response.write(b'data: {"step": "two"}\n\n')
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/invoke", invoke)
    table.put(key="default.stream", entry=route_to(await start_app(app)))
    router = await start_router()

    async with http.post(f"{router}/workflows/stream/invoke", json={}, headers=SSE) as response:
        assert response.status == 200
        assert response.content_type == "text/event-stream"
        assert response.headers["x-plnt-revision"] == "sse-1"
        first = await asyncio.wait_for(response.content.readuntil(b"\n\n"), timeout=3)
        assert first == b'data: {"step": "one"}\n\n'
        assert not second_sent
        first_seen.set()
        rest = await asyncio.wait_for(response.content.read(), timeout=3)
    assert rest == b'data: {"step": "two"}\n\n'
    assert accept_seen == ["text/event-stream"]


async def test_a_json_answer_to_an_sse_request_passes_through_as_json(
    table: RouteTable, start_runner: Factory, start_router: Factory, http: aiohttp.ClientSession
) -> None:
    runner = await start_runner("j-1")
    table.put(key="default.stream", entry=route_to(runner.url, "j-1"))
    router = await start_router()
    async with http.post(
        f"{router}/workflows/stream/invoke", json={"a": 1}, headers=SSE
    ) as response:
        assert response.status == 200
        assert response.content_type == "application/json"
        assert (await response.json())["output"] == {"a": 1}


async def test_runner_dropping_a_stream_ends_it_with_an_error_event(
    table: RouteTable, start_app: Factory, start_router: Factory, http: aiohttp.ClientSession
) -> None:
    async def invoke(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: partial\n\n")
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.abort()
        return response

    app = web.Application()
    app.router.add_post("/invoke", invoke)
    table.put(key="default.stream", entry=route_to(await start_app(app)))
    router = await start_router()
    async with http.post(f"{router}/workflows/stream/invoke", json={}, headers=SSE) as response:
        assert response.status == 200
        body = await asyncio.wait_for(response.content.read(), timeout=3)
    assert body.startswith(b"data: partial\n\n")
    assert b"event: error\n" in body
    assert b'"code": "upstream_unavailable"' in body
