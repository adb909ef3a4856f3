"""``http.request`` over the aiohttp adapter, against real loopback servers."""

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from runner_support import make_workflow

from plnt_common.nats_server import free_port
from plnt_runner.adapters.http_post import AiohttpPoster
from plnt_runner.cache import StepCache
from plnt_runner.errors import HttpStepFailed, StepFailed
from plnt_runner.executor import Executor
from plnt_runner.offline import OfflineProvider
from plnt_runner.tools import build_tools


class Target:
    """A webhook receiver that remembers what it was sent."""

    def __init__(self) -> None:
        self.received: list[Any] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/json", self.json)
        app.router.add_post("/text", self.text)
        app.router.add_post("/broken", self.broken)
        app.router.add_post("/slow", self.slow)
        return app

    async def json(self, request: web.Request) -> web.Response:
        self.received.append(await request.json())
        return web.json_response({"accepted": True, "n": len(self.received)})

    async def text(self, request: web.Request) -> web.Response:
        self.received.append(await request.json())
        return web.Response(text="queued")

    async def broken(self, request: web.Request) -> web.Response:
        return web.Response(status=503, text="downstream is down")

    async def slow(self, request: web.Request) -> web.Response:
        await asyncio.sleep(2)
        return web.Response(text="late")


@pytest.fixture
async def target() -> AsyncIterator[tuple[Target, str]]:
    receiver = Target()
    async with TestServer(receiver.app(), host="127.0.0.1") as server:
        yield receiver, str(server.make_url("")).rstrip("/")


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


async def test_post_returns_the_parsed_json_body(
    target: tuple[Target, str], session: aiohttp.ClientSession
) -> None:
    receiver, base = target
    poster = AiohttpPoster(session=session, timeout_s=5)
    assert await poster.post_json(url=f"{base}/json", payload={"a": 1}) == {
        "accepted": True,
        "n": 1,
    }
    assert receiver.received == [{"a": 1}]


async def test_post_returns_text_when_the_body_is_not_json(
    target: tuple[Target, str], session: aiohttp.ClientSession
) -> None:
    _, base = target
    poster = AiohttpPoster(session=session, timeout_s=5)
    assert await poster.post_json(url=f"{base}/text", payload={}) == "queued"


async def test_non_2xx_answer_fails_naming_url_status_and_body(
    target: tuple[Target, str], session: aiohttp.ClientSession
) -> None:
    _, base = target
    poster = AiohttpPoster(session=session, timeout_s=5)
    with pytest.raises(HttpStepFailed) as caught:
        await poster.post_json(url=f"{base}/broken", payload={})
    assert str(caught.value) == f"POST {base}/broken answered 503: downstream is down"


async def test_closed_port_fails_naming_the_url(session: aiohttp.ClientSession) -> None:
    url = f"http://127.0.0.1:{free_port()}/hook"
    poster = AiohttpPoster(session=session, timeout_s=5)
    with pytest.raises(HttpStepFailed, match=rf"POST {url} failed: Client\w*Error"):
        await poster.post_json(url=url, payload={})


async def test_slow_target_fails_after_the_timeout(
    target: tuple[Target, str], session: aiohttp.ClientSession
) -> None:
    _, base = target
    poster = AiohttpPoster(session=session, timeout_s=0.1)
    with pytest.raises(HttpStepFailed, match=r"timed out after 0.1s"):
        await poster.post_json(url=f"{base}/slow", payload={})


async def test_http_request_step_posts_its_step_input_and_is_never_cached(
    target: tuple[Target, str], session: aiohttp.ClientSession
) -> None:
    receiver, base = target
    steps: list[dict[str, Any]] = [
        {"id": "classify", "tool": "llm.classify"},
        {
            "id": "notify",
            "tool": "http.request",
            "deps": ["classify"],
            "with": {"url": f"{base}/json"},
        },
    ]
    tools = build_tools(llm=OfflineProvider(), http=AiohttpPoster(session=session, timeout_s=5))
    cache = StepCache(max_entries=16)
    executor = Executor(
        workflow=make_workflow(steps), digest="sha256:x", tools=tools, cache=cache, step_timeout_s=5
    )
    body = {"review": "Friendly staff"}

    first = await executor.run(body)
    second = await executor.run(body)

    assert len(receiver.received) == 2  # the side effect happened both times
    assert receiver.received[0] == json.loads(
        json.dumps(
            {
                "input": body,
                "steps": {"classify": first.steps["classify"].output},
                "with": {"url": f"{base}/json"},
            }
        )
    )
    assert second.steps["classify"].cached
    assert not second.steps["notify"].cached
    assert second.steps["notify"].output == {"accepted": True, "n": 2}


async def test_failed_http_request_step_fails_the_invocation_naming_it(
    session: aiohttp.ClientSession,
) -> None:
    url = f"http://127.0.0.1:{free_port()}/hook"
    steps = [{"id": "notify", "tool": "http.request", "with": {"url": url}}]
    tools = build_tools(llm=OfflineProvider(), http=AiohttpPoster(session=session, timeout_s=5))
    executor = Executor(
        workflow=make_workflow(steps), digest="sha256:x", tools=tools, cache=None, step_timeout_s=5
    )
    with pytest.raises(
        StepFailed, match=rf"step 'notify' \(http.request\) failed: POST {url} failed"
    ):
        await executor.run({})
