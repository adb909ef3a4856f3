"""A thousand shadow calls to a real runner process: its side-effect endpoint (a real HTTP
server) receives none of them while live calls reach it, and every outbound request a
shadow call makes (the LLM's) carries ``x-plnt-shadow: 1``."""

import asyncio
import os
from pathlib import Path

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer
from runner_support import workflow_yaml
from test_runner_shadow_process import runner_process

from plnt_testkit.fake_llm import FakeLLM

MIRRORED = 1000
LIVE = 20
AT_ONCE = 25


async def test_a_thousand_shadow_calls_send_nothing_and_mark_every_outbound_request(
    tmp_path: Path,
) -> None:
    posts: list[dict[str, object]] = []

    async def receive(request: web.Request) -> web.Response:
        posts.append(await request.json())
        return web.json_response({"queued": True})

    sink = web.Application()
    sink.router.add_post("/notify", receive)
    async with (
        TestServer(sink, host="127.0.0.1") as sink_server,
        FakeLLM(keep=MIRRORED + LIVE) as llm,
    ):
        steps = [
            {"id": "draft", "tool": "llm.generate", "with": {"prompt": "{{ input.text }}"}},
            {"id": "notify", "tool": "http.request", "deps": ["draft"],
             "with": {"url": str(sink_server.make_url("/notify"))}},
        ]  # fmt: skip
        (tmp_path / "workflow.yaml").write_bytes(workflow_yaml(steps))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PLNT_", "OTEL_"))}
        env.update(
            PLNT_RUNNER_PORT="0",
            PLNT_RUNNER_CACHE_SIZE="0",
            PLNT_RUNNER_WORKFLOW_FILE=str(tmp_path / "workflow.yaml"),
            PLNT_RUNNER_LLM_BASE_URL=llm.base_url,
        )
        async with (
            runner_process(env, tmp_path / "runner.log") as url,
            aiohttp.ClientSession() as http,
        ):

            async def invoke(index: int, *, shadow: bool) -> int:
                headers = {"x-plnt-shadow": "1"} if shadow else {}
                body = {"text": f"{'shadow' if shadow else 'live'} {index}"}
                async with http.post(f"{url}/invoke", json=body, headers=headers) as response:
                    await response.read()
                    return response.status

            statuses: list[int] = []
            for start in range(0, MIRRORED, AT_ONCE):
                batch = range(start, min(start + AT_ONCE, MIRRORED))
                statuses += await asyncio.gather(*(invoke(i, shadow=True) for i in batch))
            assert statuses == [200] * MIRRORED
            assert posts == [], f"{len(posts)} side effects from shadow calls"
            live = await asyncio.gather(*(invoke(i, shadow=False) for i in range(LIVE)))
            assert live == [200] * LIVE

    assert len(posts) == LIVE  # the live calls' side effects did happen, once each
    shadow_requests = [
        r for r in llm.received if r.body["messages"][-1]["content"].startswith("shadow")
    ]
    live_requests = [
        r for r in llm.received if r.body["messages"][-1]["content"].startswith("live")
    ]
    assert len(shadow_requests) == MIRRORED and len(live_requests) == LIVE
    assert all(r.headers.get("x-plnt-shadow") == "1" for r in shadow_requests)
    assert not any("x-plnt-shadow" in r.headers for r in live_requests)
