"""The DAG executor with in-process tools: concurrency, ordering, failure, timeouts, cache."""

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import pytest
from prometheus_client import REGISTRY
from runner_support import make_workflow

from plnt_runner.cache import StepCache
from plnt_runner.errors import StepFailed, ToolFailed
from plnt_runner.executor import Executor, StepFinished, TokenEmitted
from plnt_runner.tools import Tool, ToolContext


class Recorder:
    """Tools that sleep, fail or stream, and remember when each step ran and with what."""

    def __init__(self) -> None:
        self.spans: dict[str, tuple[float, float]] = {}
        self.inputs: dict[str, Mapping[str, Any]] = {}
        self.calls = 0
        self.cancelled: list[str] = []

    def tool(self, name: str, *, cacheable: bool = False) -> Tool:
        async def run(step: Mapping[str, Any], ctx: ToolContext) -> Any:
            self.calls += 1
            self.inputs[ctx.step_id] = step
            started = time.perf_counter()
            config = step["with"]
            try:
                await asyncio.sleep(float(config.get("sleep", 0)))
            except asyncio.CancelledError:
                self.cancelled.append(ctx.step_id)
                raise
            if config.get("fail"):
                raise ToolFailed(str(config["fail"]))
            if config.get("crash"):
                raise ZeroDivisionError("division by zero")
            if ctx.emit_token is not None:
                for delta in ("a", "b", "c"):
                    ctx.emit_token(delta)
            self.spans[ctx.step_id] = (started, time.perf_counter())
            return {"step": ctx.step_id, "deps": sorted(step["steps"])}

        return Tool(name=name, run=run, cacheable=cacheable)

    def registry(self, *, cacheable: bool = False) -> dict[str, Tool]:
        return {
            name: self.tool(name, cacheable=cacheable)
            for name in ("fake.classify", "fake.query", "fake.generate", "fake.moderate")
        } | {"http.request": self.tool("http.request")}


def executor_for(
    steps: list[dict[str, Any]],
    tools: Mapping[str, Tool],
    *,
    cache: StepCache | None = None,
    timeout: float = 5.0,
    digest: str = "sha256:test",
) -> Executor:
    return Executor(
        workflow=make_workflow(steps),
        digest=digest,
        tools=tools,
        cache=cache,
        step_timeout_s=timeout,
    )


DIAMOND: list[dict[str, Any]] = [
    {"id": "start", "tool": "fake.classify"},
    {"id": "left", "tool": "fake.query", "deps": ["start"], "with": {"sleep": 0.1}},
    {"id": "right", "tool": "fake.query", "deps": ["start"], "with": {"sleep": 0.1}},
    {"id": "join", "tool": "fake.generate", "deps": ["left", "right"]},
]


async def test_diamond_of_two_100ms_steps_runs_both_branches_concurrently() -> None:
    recorder = Recorder()
    executor = executor_for(DIAMOND, recorder.registry())

    invocation = await executor.run({"q": 1})

    # each branch sleeps 100 ms: run one after the other, their spans could not overlap
    left, right = recorder.spans["left"], recorder.spans["right"]
    assert max(left[0], right[0]) < min(left[1], right[1]), "branches never ran at once"
    assert list(invocation.steps) == ["start", "left", "right", "join"]


async def test_each_step_starts_after_all_its_deps_and_sees_exactly_their_outputs() -> None:
    steps: list[dict[str, Any]] = [
        {"id": "e", "tool": "fake.generate", "deps": ["c", "d"]},
        {"id": "c", "tool": "fake.query", "deps": ["a"], "with": {"sleep": 0.03}},
        {"id": "d", "tool": "fake.query", "deps": ["a", "b"], "with": {"sleep": 0.01}},
        {"id": "a", "tool": "fake.classify", "with": {"sleep": 0.02}},
        {"id": "b", "tool": "fake.classify"},
    ]
    recorder = Recorder()
    invocation = await executor_for(steps, recorder.registry()).run({"review": "x"})

    deps = {s["id"]: s.get("deps", []) for s in steps}
    for step_id, (started, _) in recorder.spans.items():
        for dep in deps[step_id]:
            assert started >= recorder.spans[dep][1], f"{step_id} started before {dep} finished"
        step_input = recorder.inputs[step_id]
        assert step_input["input"] == {"review": "x"}
        assert list(step_input["steps"]) == deps[step_id]
        assert step_input["with"] == next(s.get("with", {}) for s in steps if s["id"] == step_id)
    order = list(invocation.steps)
    assert all(order.index(dep) < order.index(sid) for sid in deps for dep in deps[sid])
    assert invocation.steps["e"].output == {"step": "e", "deps": ["c", "d"]}


async def test_failing_step_fails_the_invocation_naming_it_and_cancels_running_steps() -> None:
    steps: list[dict[str, Any]] = [
        {"id": "start", "tool": "fake.classify"},
        {
            "id": "doomed",
            "tool": "fake.query",
            "deps": ["start"],
            "with": {"fail": "model said no", "sleep": 0.01},
        },
        {"id": "slow", "tool": "fake.query", "deps": ["start"], "with": {"sleep": 5}},
        {"id": "after", "tool": "fake.generate", "deps": ["doomed", "slow"]},
    ]
    recorder = Recorder()
    started = time.perf_counter()
    with pytest.raises(StepFailed) as caught:
        await executor_for(steps, recorder.registry()).run({})

    assert time.perf_counter() - started < 1.0
    assert caught.value.step == "doomed"
    assert caught.value.tool == "fake.query"
    assert str(caught.value) == "step 'doomed' (fake.query) failed: model said no"
    assert recorder.cancelled == ["slow"]
    assert "after" not in recorder.inputs


async def test_step_over_its_deadline_fails_with_a_timeout_naming_it() -> None:
    steps: list[dict[str, Any]] = [{"id": "stuck", "tool": "fake.generate", "with": {"sleep": 2}}]
    with pytest.raises(
        StepFailed, match=r"step 'stuck' \(fake.generate\) failed: timed out after 0.05s"
    ):
        await executor_for(steps, Recorder().registry(), timeout=0.05).run({})


async def test_a_crashing_tool_is_reported_with_its_exception_type() -> None:
    steps: list[dict[str, Any]] = [
        {"id": "buggy", "tool": "fake.classify", "with": {"crash": True}}
    ]
    with pytest.raises(StepFailed, match="ZeroDivisionError: division by zero") as caught:
        await executor_for(steps, Recorder().registry()).run({})
    assert caught.value.step == "buggy"


async def test_cancelling_an_invocation_cancels_its_running_steps() -> None:
    recorder = Recorder()
    steps: list[dict[str, Any]] = [{"id": "slow", "tool": "fake.classify", "with": {"sleep": 5}}]
    task = asyncio.create_task(executor_for(steps, recorder.registry()).run({}))
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert recorder.cancelled == ["slow"]


async def test_events_report_each_finished_step_and_streamed_tokens() -> None:
    events: list[Any] = []
    invocation = await executor_for(DIAMOND, Recorder().registry()).run({}, on_event=events.append)

    finished = [e for e in events if isinstance(e, StepFinished)]
    tokens = [e for e in events if isinstance(e, TokenEmitted)]
    assert next(e.step for e in finished) == "start"
    assert [e.step for e in finished][-1] == "join"
    assert {e.step for e in finished} == set(invocation.steps)
    assert [t.delta for t in tokens if t.step == "join"] == ["a", "b", "c"]
    # Without a listener no tool is asked to stream.
    recorder = Recorder()
    await executor_for(DIAMOND, recorder.registry()).run({})
    assert recorder.spans.keys() == set(invocation.steps)


def _cache_count(result: str) -> float:
    return REGISTRY.get_sample_value("plnt_step_cache_requests_total", {"result": result}) or 0.0


async def test_cache_serves_a_repeated_input_without_calling_the_tool_again() -> None:
    recorder = Recorder()
    cache = StepCache(max_entries=100)
    executor = executor_for(DIAMOND, recorder.registry(cacheable=True), cache=cache)
    hits_before, misses_before = _cache_count("hit"), _cache_count("miss")

    first = await executor.run({"review": "same"})
    calls_after_first = recorder.calls
    second = await executor.run({"review": "same"})

    assert recorder.calls == calls_after_first == 4
    assert not any(r.cached for r in first.steps.values())
    assert all(r.cached for r in second.steps.values())
    assert {k: r.output for k, r in second.steps.items()} == {
        k: r.output for k, r in first.steps.items()
    }
    assert (cache.hits, cache.misses, cache.hit_rate) == (4, 4, 0.5)
    assert _cache_count("hit") - hits_before == 4
    assert _cache_count("miss") - misses_before == 4

    await executor.run({"review": "different"})
    assert recorder.calls == 8


async def test_cache_keys_include_the_spec_digest() -> None:
    recorder = Recorder()
    cache = StepCache(max_entries=100)
    steps: list[dict[str, Any]] = [{"id": "only", "tool": "fake.classify"}]
    await executor_for(
        steps, recorder.registry(cacheable=True), cache=cache, digest="sha256:a"
    ).run({})
    await executor_for(
        steps, recorder.registry(cacheable=True), cache=cache, digest="sha256:b"
    ).run({})
    assert recorder.calls == 2


async def test_non_cacheable_tools_run_every_time_even_with_a_cache() -> None:
    recorder = Recorder()
    cache = StepCache(max_entries=100)
    steps: list[dict[str, Any]] = [
        {"id": "post", "tool": "http.request", "with": {"url": "http://127.0.0.1:9/hook"}}
    ]
    executor = executor_for(steps, recorder.registry(), cache=cache)
    await executor.run({"same": True})
    second = await executor.run({"same": True})
    assert recorder.calls == 2
    assert not second.steps["post"].cached
    assert cache.hits + cache.misses == 0


async def test_executor_refuses_a_step_whose_tool_is_not_in_the_registry() -> None:
    tools = Recorder().registry()
    del tools["http.request"]
    with pytest.raises(Exception, match=r"'call' names tool 'http\.request'"):
        executor_for(
            [{"id": "call", "tool": "http.request", "with": {"url": "http://127.0.0.1:9/x"}}], tools
        )
