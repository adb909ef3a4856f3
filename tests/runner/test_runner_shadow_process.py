"""A shadow call to a real runner process (``python -m plnt_runner``) with tracing on: the
LLM request goes through the traced provider and still carries ``x-plnt-shadow``, the
side-effect tool posts nothing (the sink counts the POSTs), and the spans say which call
was a shadow call and which step only answered its dry run."""

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer
from runner_support import workflow_yaml

from plnt_testkit.fake_llm import FakeLLM
from plnt_testkit.otlp_receiver import OtlpReceiver

TOOLS_MODULE = """
import json
import urllib.request

def notify(step):
    request = urllib.request.Request(
        step["with"]["url"], data=json.dumps(step).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())
"""


@asynccontextmanager
async def runner_process(env: dict[str, str], log: Path) -> AsyncIterator[str]:
    with log.open("ab") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "plnt_runner", env=env, stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), timeout=20)).decode().strip()
        assert line.startswith("listening on http://"), f"{line!r}; see {log}"
        yield line.removeprefix("listening on ")
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()


async def test_a_traced_runner_process_dry_runs_a_shadow_call_and_marks_its_spans(
    tmp_path: Path,
) -> None:
    posts: list[str] = []

    async def receive(request: web.Request) -> web.Response:
        posts.append(request.path)
        return web.json_response({"queued": True})

    sink = web.Application()
    sink.router.add_post("/notify", receive)
    (tmp_path / "shadowtools.py").write_text(TOOLS_MODULE)
    async with (
        TestServer(sink, host="127.0.0.1") as sink_server,
        OtlpReceiver() as receiver,
        FakeLLM() as llm,
    ):
        steps = [
            {"id": "draft", "tool": "llm.chat", "with": {"prompt": "{{ input.text }}"}},
            {"id": "notify", "tool": "crm.notify", "deps": ["draft"],
             "with": {"url": str(sink_server.make_url("/notify"))}},
        ]  # fmt: skip
        tools = [
            {
                "name": "crm.notify",
                "call": "shadowtools:notify",
                "sideEffects": True,
                "dryRun": {"queued": False},
            }
        ]
        (tmp_path / "workflow.yaml").write_bytes(workflow_yaml(steps, tools=tools))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PLNT_", "OTEL_"))}
        env.update(
            PYTHONPATH=f"{tmp_path}{os.pathsep}{env.get('PYTHONPATH', '')}",
            OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{receiver.endpoint}/v1/traces",
            OTEL_BSP_SCHEDULE_DELAY="20",
            PLNT_RUNNER_PORT="0",
            PLNT_RUNNER_CACHE_SIZE="0",
            PLNT_RUNNER_WORKFLOW_FILE=str(tmp_path / "workflow.yaml"),
            PLNT_RUNNER_LLM_BASE_URL=llm.base_url,
        )
        async with (
            runner_process(env, tmp_path / "runner.log") as url,
            aiohttp.ClientSession() as http,
        ):
            async with http.post(
                f"{url}/invoke", json={"text": "shadow"}, headers={"x-plnt-shadow": "1"}
            ) as response:
                assert response.status == 200, await response.text()
                shadow = await response.json()
            assert posts == []
            async with http.post(f"{url}/invoke", json={"text": "live"}) as response:
                assert response.status == 200, await response.text()
            assert posts == ["/notify"]
            spans = await receiver.wait_for(
                lambda got: sum(s.name == "POST /invoke" for s in got) >= 2
            )

    assert shadow["steps"]["notify"]["output"] == {"queued": False}
    shadow_llm = [r.headers for r in llm.received if r.user == "shadow"]
    live_llm = [r.headers for r in llm.received if r.user == "live"]
    assert [h.get("x-plnt-shadow") for h in shadow_llm] == ["1"]
    assert [h.get("x-plnt-shadow") for h in live_llm] == [None]
    servers = [s for s in spans if s.name == "POST /invoke"]
    assert sorted(s.attributes["plnt.shadow"] for s in servers) == [False, True]
    notify_spans = [s for s in spans if s.name == "step notify"]
    assert sorted(bool(s.attributes.get("plnt.step.dry_run")) for s in notify_spans) == [
        False,
        True,
    ]
