"""OpenAI-compatible endpoints over real sockets: chat completions (plain and streamed), models."""

import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from plnt_router.table import RouteTable

Factory = Callable[..., Awaitable[Any]]
ReadError = Callable[[aiohttp.ClientResponse], Awaitable[dict[str, str]]]


async def test_chat_completion_calls_the_workflow_with_the_last_user_message(
    table: RouteTable,
    start_runner: Factory,
    start_router: Factory,
    make_route: Any,
    http: aiohttp.ClientSession,
) -> None:
    runner = await start_runner("r-3")
    table.put(key="default.review-responder", entry=make_route("review-responder", stable=runner))
    router = await start_router()
    request = {
        "model": "review-responder",
        "messages": [
            {"role": "system", "content": "be nice"},
            {"role": "user", "content": '{"review": "Great service but slow parking"}'},
        ],
    }
    async with http.post(f"{router}/v1/chat/completions", json=request) as response:
        assert response.status == 200
        assert response.headers["x-plnt-revision"] == "r-3"
        body = await response.json()

    assert runner.bodies == [{"review": "Great service but slow parking"}]
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == "review-responder"
    assert isinstance(body["created"], int)
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "echo from r-3"},
            "finish_reason": "stop",
        }
    ]


async def test_streamed_chat_completion_is_chunks_then_done(
    table: RouteTable,
    start_runner: Factory,
    start_router: Factory,
    make_route: Any,
    http: aiohttp.ClientSession,
) -> None:
    runner = await start_runner("r-4")
    table.put(key="default.echo", entry=make_route("echo", stable=runner))
    router = await start_router()
    request = {"model": "echo", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with http.post(f"{router}/v1/chat/completions", json=request) as response:
        assert response.status == 200
        assert response.content_type == "text/event-stream"
        raw = (await response.read()).decode()

    assert runner.bodies == [{"input": "hi"}]
    events = [block.removeprefix("data: ") for block in raw.split("\n\n") if block]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert content == "echo from r-4"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_chat_completion_errors_use_the_router_error_shape(
    table: RouteTable,
    start_runner: Factory,
    start_router: Factory,
    make_route: Any,
    http: aiohttp.ClientSession,
    read_error: ReadError,
) -> None:
    runner = await start_runner("r-5")
    table.put(key="default.echo", entry=make_route("echo", stable=runner))
    router = await start_router()
    url = f"{router}/v1/chat/completions"
    user = [{"role": "user", "content": "hi"}]

    cases = [
        ({"messages": user}, 422, "invalid_request"),
        ({"model": "echo", "messages": []}, 422, "invalid_request"),
        ({"model": "missing", "messages": user}, 404, "workflow_not_found"),
    ]
    for request, status, code in cases:
        async with http.post(url, json=request) as response:
            assert response.status == status, request
            assert (await read_error(response))["code"] == code
    assert runner.bodies == []


async def test_models_lists_only_workflows_with_a_ready_route(
    table: RouteTable,
    start_runner: Factory,
    start_router: Factory,
    make_route: Any,
    http: aiohttp.ClientSession,
) -> None:
    runner = await start_runner("1")
    table.put(key="default.ready", entry=make_route("ready", stable=runner))
    table.put(key="default.canary-only", entry=make_route("canary-only", canary=runner, weight=10))
    table.put(key="default.smoking", entry=make_route("smoking", canary=runner, weight=0))
    table.put(key="team-a.other", entry=make_route("other", namespace="team-a", stable=runner))
    router = await start_router()
    async with http.get(f"{router}/v1/models") as response:
        assert response.status == 200
        body = await response.json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["canary-only", "ready", "team-a/other"]
    assert all(m["object"] == "model" and m["owned_by"] == "plnt" for m in body["data"])


async def test_models_hides_namespaces_whose_key_the_caller_lacks(
    table: RouteTable,
    start_runner: Factory,
    start_router: Factory,
    make_route: Any,
    http: aiohttp.ClientSession,
) -> None:
    runner = await start_runner("1")
    table.put(key="default.public", entry=make_route("public", stable=runner))
    table.put(key="secret.private", entry=make_route("private", namespace="secret", stable=runner))
    router = await start_router(api_keys={"secret": "k"})
    async with http.get(f"{router}/v1/models") as response:
        assert [m["id"] for m in (await response.json())["data"]] == ["public"]
    async with http.get(f"{router}/v1/models", headers={"Authorization": "Bearer k"}) as response:
        assert [m["id"] for m in (await response.json())["data"]] == ["public", "secret/private"]
