"""Shadow calls (``x-plnt-shadow: 1``) on the runner's HTTP API, with real servers around it:
a fake OpenAI-compatible LLM that records the headers it is sent, and an HTTP sink that
counts the POSTs the workflow's tools make. A shadow call runs no side-effect tool (the
step answers its ``dryRun``), carries the header on every call it makes, and lists its
intended side-effect calls in ``x-plnt-effects``; a live call beside it is untouched."""

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import runner_shadow_tools
from aiohttp import web
from aiohttp.test_utils import TestServer
from runner_support import read_sse, running_runner, workflow_yaml

from plnt_runner.effects import MAX_EFFECTS
from plnt_runner.settings import RunnerSettings
from plnt_runner.tools import HTTP_DRY_RUN
from plnt_testkit.fake_llm import FakeLLM

SHADOW = {"x-plnt-shadow": "1"}
EFFECTS = {"x-plnt-effects": "1"}
SSE = {"Accept": "text/event-stream"}
NOTIFY_DRY_RUN = {"queued": False, "reason": "shadow call"}


@dataclass(frozen=True)
class Post:
    path: str
    shadow_header: str | None


class Sink:
    """Where the workflow's tools POST: every request is kept, none deduplicated."""

    def __init__(self) -> None:
        self.posts: list[Post] = []

    async def receive(self, request: web.Request) -> web.Response:
        await request.read()
        self.posts.append(Post(request.path, request.headers.get("x-plnt-shadow")))
        if request.path == "/broken":
            return web.json_response({"ok": False}, status=503)
        return web.json_response({"ok": True, "n": len(self.posts)})

    def count(self, path: str) -> int:
        return sum(1 for post in self.posts if post.path == path)


@dataclass
class Stack:
    base: str
    http: aiohttp.ClientSession
    llm: FakeLLM
    sink: Sink
    sink_url: str
    app: web.Application

    async def invoke(self, text: str, headers: dict[str, str] | None = None) -> Any:
        async with self.http.post(
            f"{self.base}/invoke", json={"text": text}, headers=headers or {}
        ) as response:
            assert response.status == 200, await response.text()
            return await response.json(), dict(response.headers)

    def llm_headers_for(self, text: str) -> list[dict[str, str]]:
        """Headers of the LLM requests whose prompt holds ``text``."""
        return [dict(r.headers) for r in self.llm.received if text in r.user]


def flow(sink_url: str) -> bytes:
    """gate -> lookup (a read) -> draft (the LLM) -> notify (code, side effect) and hook
    (``http.request``), the last two in that order."""

    def step(step_id: str, tool: str, deps: list[str], **config: str) -> dict[str, Any]:
        return {"id": step_id, "tool": tool, "deps": deps, "with": config}

    steps = [
        {"id": "wait", "tool": "flow.gate"},
        step("lookup", "crm.lookup", ["wait"], url=f"{sink_url}/lookup"),
        step("draft", "llm.chat", ["lookup"], prompt="{{ input.text }}"),
        step("notify", "crm.notify", ["draft"], url=f"{sink_url}/notify"),
        step("hook", "http.request", ["draft"], url=f"{sink_url}/hook"),
    ]
    tools = [
        {"name": "flow.gate", "call": "runner_shadow_tools:gate"},
        {"name": "crm.lookup", "call": "runner_shadow_tools:lookup"},
        {
            "name": "crm.notify",
            "call": "runner_shadow_tools:notify",
            "sideEffects": True,
            "dryRun": NOTIFY_DRY_RUN,
        },
    ]
    return workflow_yaml(steps, name="shadow-flow", tools=tools)


async def start_stack(tmp_path: Path, **settings: Any) -> AsyncIterator[Stack]:
    sink = Sink()
    sink_app = web.Application()
    sink_app.router.add_post("/{name}", sink.receive)
    async with TestServer(sink_app, host="127.0.0.1") as sink_server, FakeLLM() as llm:
        sink_url = str(sink_server.make_url("")).rstrip("/")
        path = tmp_path / "workflow.yaml"
        path.write_bytes(flow(sink_url))
        runner_settings = RunnerSettings(
            workflow_file=path, revision="rev-s", llm_base_url=llm.base_url, **settings
        )
        async with running_runner(runner_settings) as (base, http, app):
            yield Stack(base, http, llm, sink, sink_url, app)


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    # No step cache: every call makes its own LLM and lookup calls, for the headers to show.
    async for started in start_stack(tmp_path, cache_size=0):
        yield started


@pytest.fixture(autouse=True)
def clean_gates() -> None:
    for registry in (
        runner_shadow_tools.GATES,
        runner_shadow_tools.ARRIVED,
        runner_shadow_tools.SEEN_SHADOW,
    ):
        registry.clear()


def sha256_of(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def side_effect_inputs(body: dict[str, Any], text: str, sink_prefix: str) -> list[tuple[str, str]]:
    """(tool, input sha256) of notify and hook, computed from the answer's own steps."""
    draft = body["steps"]["draft"]["output"]
    calls = []
    for step, tool in (("notify", "crm.notify"), ("hook", "http.request")):
        config = {"url": f"{sink_prefix}/{step}"}
        tool_input = {"input": {"text": text}, "steps": {"draft": draft}, "with": config}
        calls.append((tool, sha256_of(tool_input)))
    return calls


def listed(header: str) -> list[tuple[str, str]]:
    return [(entry["tool"], entry["input_sha256"]) for entry in json.loads(header)]


async def test_a_shadow_call_executes_no_side_effect_tool_and_answers_their_dry_runs(
    stack: Stack,
) -> None:
    body, _ = await stack.invoke("shadow one", SHADOW)
    assert stack.sink.count("/notify") == 0
    assert stack.sink.count("/hook") == 0
    steps = body["steps"]
    assert steps["notify"]["output"] == NOTIFY_DRY_RUN
    assert steps["hook"]["output"] == HTTP_DRY_RUN
    assert steps["notify"]["dry_run"] is True and steps["notify"]["cached"] is False
    assert "dry_run" not in steps["draft"]  # everything else ran as usual
    assert stack.sink.count("/lookup") == 1

    await stack.invoke("live one")
    assert (stack.sink.count("/notify"), stack.sink.count("/hook")) == (1, 1)


async def test_the_shadow_header_travels_on_the_llm_call_and_on_calls_code_tools_make(
    stack: Stack,
) -> None:
    await stack.invoke("shadow two", SHADOW)
    await stack.invoke("live two")
    [shadow_llm] = stack.llm_headers_for("shadow two")
    [live_llm] = stack.llm_headers_for("live two")
    assert shadow_llm.get("x-plnt-shadow") == "1"
    assert "x-plnt-shadow" not in live_llm
    lookups = [post.shadow_header for post in stack.sink.posts if post.path == "/lookup"]
    assert lookups == ["1", None]  # the shadow call's read, then the live call's
    hook = [post for post in stack.sink.posts if post.path == "/hook"]
    assert hook == [Post("/hook", None)]  # the live call's http.request, plain


async def test_a_streamed_shadow_call_ends_with_the_intended_calls_in_its_result_event(
    stack: Stack,
) -> None:
    async with stack.http.post(
        f"{stack.base}/invoke", json={"text": "shadow three"}, headers={**SSE, **SHADOW}
    ) as response:
        assert response.status == 200
        events = [event async for event in read_sse(response)]
    names = [name for name, _ in events]
    assert names[-1] == "result", names
    result = events[-1][1]
    assert stack.sink.count("/notify") == stack.sink.count("/hook") == 0
    dry_steps = {data["step"] for name, data in events if name == "step" and data.get("dry_run")}
    assert dry_steps == {"notify", "hook"}
    assert [entry["tool"] for entry in result["effects"]] == ["crm.notify", "http.request"]
    assert "effects_dropped" not in result
    [streamed_llm] = stack.llm_headers_for("shadow three")  # the streaming LLM request
    assert streamed_llm.get("x-plnt-shadow") == "1"
    assert stack.llm.received[-1].body.get("stream") is True


async def test_effects_list_executed_calls_of_a_live_call_and_intended_ones_of_a_shadow_call(
    stack: Stack,
) -> None:
    live, live_headers = await stack.invoke("same words", EFFECTS)
    _, shadow_headers = await stack.invoke("same words", SHADOW)
    _, plain_headers = await stack.invoke("same words")
    expected = side_effect_inputs(live, "same words", stack.sink_url)
    assert listed(live_headers["x-plnt-effects"]) == expected
    # same input, same calls: what the judge compares, the result aside
    assert listed(shadow_headers["x-plnt-effects"]) == listed(live_headers["x-plnt-effects"])
    assert "x-plnt-effects" not in plain_headers
    assert "x-plnt-effects-dropped" not in live_headers
    assert (stack.sink.count("/notify"), stack.sink.count("/hook")) == (2, 2)  # live, plain


async def test_a_shadow_call_and_a_live_call_interleaved_keep_their_own_flag(
    stack: Stack,
) -> None:
    """The shadow call waits at its first step while the live call starts; then the shadow
    call finishes while the live call is still open: a flag shared between invocations
    (a module global) shows up on one of them."""
    for text in ("shadow four", "live four"):
        runner_shadow_tools.GATES[text] = asyncio.Event()
        runner_shadow_tools.ARRIVED[text] = asyncio.Event()
    shadow = asyncio.create_task(stack.invoke("shadow four", SHADOW))
    await _arrived("shadow four")
    live = asyncio.create_task(stack.invoke("live four", EFFECTS))
    await _arrived("live four")
    runner_shadow_tools.GATES["shadow four"].set()
    _, shadow_headers = await asyncio.wait_for(shadow, timeout=10)
    runner_shadow_tools.GATES["live four"].set()
    _, live_headers = await asyncio.wait_for(live, timeout=10)

    assert runner_shadow_tools.SEEN_SHADOW == {"shadow four": True, "live four": False}
    assert [h.get("x-plnt-shadow") for h in stack.llm_headers_for("shadow four")] == ["1"]
    assert [h.get("x-plnt-shadow") for h in stack.llm_headers_for("live four")] == [None]
    # the live call's side effects happened, once each; the shadow call's did not
    side_effects = [(p.path, p.shadow_header) for p in stack.sink.posts if p.path != "/lookup"]
    assert sorted(side_effects) == [("/hook", None), ("/notify", None)]  # in either order
    assert len(json.loads(live_headers["x-plnt-effects"])) == 2
    assert len(json.loads(shadow_headers["x-plnt-effects"])) == 2


async def _arrived(text: str) -> None:
    try:
        await asyncio.wait_for(runner_shadow_tools.ARRIVED[text].wait(), timeout=10)
    except TimeoutError:
        raise AssertionError(f"the call {text!r} never reached its gate step") from None


async def test_a_dry_answer_never_enters_the_step_cache(tmp_path: Path) -> None:
    async for stack in start_stack(tmp_path):  # the step cache on
        shadow, _ = await stack.invoke("cached words", SHADOW)
        live, _ = await stack.invoke("cached words")
        assert shadow["steps"]["notify"]["output"] == NOTIFY_DRY_RUN
        assert live["steps"]["notify"]["output"]["ok"] is True  # the sink's answer
        assert live["steps"]["notify"]["cached"] is False
        assert live["steps"]["draft"]["cached"] is True  # the cache was on all along
        again, _ = await stack.invoke("cached words")
        assert again["steps"]["notify"]["cached"] is False  # side effects: never cached
        assert (stack.sink.count("/notify"), stack.sink.count("/hook")) == (2, 2)


async def test_shadow_calls_are_counted_apart_in_the_metrics(stack: Stack) -> None:
    before = await _metrics(stack)
    await stack.invoke("shadow five", SHADOW)
    await stack.invoke("live five")
    after = await _metrics(stack)
    shadow_ok = (
        'plnt_runner_shadow_calls_total{revision="rev-s",status="ok",workflow="shadow-flow"}'
    )
    dry_notify = 'plnt_runner_dry_runs_total{tool="crm.notify",workflow="shadow-flow"}'
    assert after[shadow_ok] - before.get(shadow_ok, 0.0) == 1
    assert after[dry_notify] - before.get(dry_notify, 0.0) == 1


async def _metrics(stack: Stack) -> dict[str, float]:
    async with stack.http.get(f"{stack.base}/metrics") as response:
        text = await response.text()
    samples = {}
    for line in text.splitlines():
        if line.startswith(("plnt_runner_shadow_calls_total{", "plnt_runner_dry_runs_total{")):
            name, _, value = line.rpartition(" ")
            samples[_sorted_labels(name)] = float(value)
    return samples


def _sorted_labels(sample: str) -> str:
    name, _, labels = sample.partition("{")
    pairs = sorted(labels.rstrip("}").split(","))
    return f"{name}{{{','.join(pairs)}}}"


async def test_over_the_cap_the_answer_lists_the_first_calls_and_counts_the_rest(
    tmp_path: Path,
) -> None:
    """A spec holds at most 64 steps, but 64 calls of a tool with a 120-character name are
    longer than an HTTP client takes in one header line: the list stops short of that."""
    tool = "acme." + "x" * 115
    steps = [{"id": f"n{i}", "tool": tool, "with": {"i": i}} for i in range(MAX_EFFECTS)]
    tools = [{"name": tool, "call": "runner_shadow_tools:notify", "sideEffects": True}]
    path = tmp_path / "workflow.yaml"
    path.write_bytes(workflow_yaml(steps, name="many-effects", tools=tools))
    settings = RunnerSettings(workflow_file=path, revision="rev-m")
    async with running_runner(settings) as (base, http, _):
        async with http.post(f"{base}/invoke", json={}, headers=SHADOW) as response:
            assert response.status == 200, await response.text()
            listed_calls = json.loads(response.headers["x-plnt-effects"])
            dropped = int(response.headers["x-plnt-effects-dropped"])
        async with http.post(f"{base}/invoke", json={}, headers={**SHADOW, **SSE}) as response:
            *_, (name, result) = [event async for event in read_sse(response)]
    assert len(response.headers.get("x-plnt-effects", "")) == 0  # SSE: in the event instead
    assert dropped > 0 and len(listed_calls) + dropped == MAX_EFFECTS
    assert name == "result"
    assert (len(result["effects"]), result["effects_dropped"]) == (len(listed_calls), dropped)


async def test_a_failed_call_still_lists_the_side_effect_calls_made_before_the_failure(
    tmp_path: Path,
) -> None:
    async for stack in start_stack(tmp_path, cache_size=0):
        tools = [{"name": "crm.notify", "call": "runner_shadow_tools:notify", "sideEffects": True}]
        steps = [
            {"id": "notify", "tool": "crm.notify", "with": {"url": f"{stack.sink_url}/notify"}},
            {"id": "hook", "tool": "http.request", "deps": ["notify"],
             "with": {"url": f"{stack.sink_url}/broken"}},
        ]  # fmt: skip
        path = tmp_path / "failing.yaml"
        path.write_bytes(workflow_yaml(steps, name="failing-flow", tools=tools))
        settings = RunnerSettings(workflow_file=path, revision="rev-f")
        async with running_runner(settings) as (base, http, _):
            async with http.post(f"{base}/invoke", json={}, headers=EFFECTS) as response:
                assert response.status == 500
                header = response.headers["x-plnt-effects"]
            async with http.post(f"{base}/invoke", json={}, headers={**EFFECTS, **SSE}) as response:
                *_, (name, failure) = [event async for event in read_sse(response)]
        assert [tool for tool, _ in listed(header)] == ["crm.notify", "http.request"]
        assert (name, failure["step"]) == ("error", "hook")
        assert [entry["tool"] for entry in failure["effects"]] == ["crm.notify", "http.request"]
        assert (stack.sink.count("/notify"), stack.sink.count("/broken")) == (2, 2)
