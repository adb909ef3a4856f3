"""Runner figures: the DAG executor in-process, and a runner process flooded past its limit.

In-process (this process pinned to the system-under-test core): the diamond (two 100 ms
branches overlap), the executor's own cost per step over a 40-step chain of instant
tools (against the bare asyncio floor of the same awaits), and the step cache's
throughput gain with the fake LLM (fixed latency, in its own process on the load core)
and 34 % repeated inputs at a fixed concurrency. As a process: a runner with a tiny
in-flight limit and queue, flooded at once (429s, the ``plnt_queue_depth`` gauge), and
its ``/metrics`` checked for the GPU gauge (absent, not zero, without a GPU).
"""

import asyncio
import itertools
import random
import re
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client import REGISTRY

from bench import loadgen
from bench.loadgen import Target
from bench.procs import LOAD_CPU, SUT_CPU, Child, pin, unpin
from bench.stats import percentile
from bench.table import Row
from plnt_common.workflow import Workflow, parse_workflow, spec_digest
from plnt_runner.adapters.http_post import AiohttpPoster
from plnt_runner.adapters.nvml import GpuProbe
from plnt_runner.adapters.openai_chat import OpenAIChatProvider
from plnt_runner.cache import StepCache
from plnt_runner.executor import Executor
from plnt_runner.ports import DEFAULT_OPTIONS, CallOptions, Message
from plnt_runner.tools import Tool, ToolContext, build_tools
from plnt_runner.usage import TokenUsage

EXAMPLE = (
    Path(__file__).resolve().parents[1]
    / "examples"
    / "registry"
    / "review-responder"
    / "1.2.0"
    / "workflow.yaml"
)
BRANCH_MS = 100
CHAIN_STEPS = 40
REPEAT_SHARE = 0.34
FLOOD_LIMITS = {"max_in_flight": 2, "max_queue": 4}
FLOOD_CALLS = 30
_RUNNER_DEPTH = re.compile(rb'^plnt_queue_depth\{component="runner"\} ([\d.]+)$', re.M)
_GPU_SAMPLE = re.compile(rb"^plnt_gpu_utilization_ratio\{", re.M)


@dataclass(frozen=True)
class RunnerBench:
    """How much work each runner figure gets."""

    diamond_runs: int = 20
    chain_runs: int = 300
    cache_calls: int = 600
    """Throughput is a steady state: a round of 300 calls at concurrency 16 spent about 5%
    of its time in its last, partly empty window (1.44x at 300 calls, 1.49x at 600)."""
    cache_rounds: int = 4
    cache_concurrency: int = 16
    llm_latency_ms: float = 20.0


async def runner_figures(tmp: Path, bench: RunnerBench) -> list[Row]:
    """Every runner row; starts and stops the fake LLM and the flooded runner."""
    fake_llm = Child.python(
        "bench.fake_llm",
        "--latency-ms",
        f"{bench.llm_latency_ms:g}",
        cpu=LOAD_CPU,
        log=tmp / "fake-llm.log",
    )
    with fake_llm:
        pin(0, SUT_CPU)
        try:
            rows = await _diamonds(bench)
            rows += await _step_overhead(bench)
            rows += await _template_overhead(bench)
            rows += await _cache(bench, fake_llm.url)
        finally:
            unpin()
        pin(0, LOAD_CPU)
        try:
            rows += await _flood(tmp, fake_llm.url)
        finally:
            unpin()
    return rows


SLEEP_TOOL = "bench.sleep"
"""The instant (or sleeping) tool the executor rows run: a code tool of the bench's spec."""


def _workflow(steps: list[dict[str, Any]], **spec: Any) -> Workflow:
    return Workflow.model_validate(
        {
            "apiVersion": "microagents.dev/v1",
            "kind": "Workflow",
            "metadata": {"name": "bench", "version": "1.0.0"},
            "spec": {
                "runtime": {"image": "bench", "entrypoint": "bench"},
                "steps": steps,
                "tools": [{"name": SLEEP_TOOL, "call": "bench.runner:_sleep_tool"}],
                **spec,
            },
        }
    )


async def _sleep_tool(step: Mapping[str, Any], ctx: ToolContext) -> dict[str, bool]:
    """Sleeps ``with.sleep_ms``; returns at once (no await at all) when that is 0."""
    sleep_ms = step["with"].get("sleep_ms", 0)
    if sleep_ms:
        await asyncio.sleep(sleep_ms / 1000)
    return {"ok": True}


def _executor(steps: list[dict[str, Any]], *, cache: StepCache | None = None) -> Executor:
    tool = Tool(name=SLEEP_TOOL, run=_sleep_tool, cacheable=cache is not None)
    return Executor(
        workflow=_workflow(steps),
        digest="sha256:bench",
        tools={SLEEP_TOOL: tool},
        cache=cache,
        step_timeout_s=60,
    )


async def _timed(run: Callable[[], Awaitable[object]], runs: int) -> list[float]:
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        await run()
        timings.append(time.perf_counter() - started)
    return timings


async def _diamonds(bench: RunnerBench) -> list[Row]:
    sleep = {"sleep_ms": BRANCH_MS}
    diamond: list[dict[str, Any]] = [
        {"id": "start", "tool": SLEEP_TOOL},
        {"id": "left", "tool": SLEEP_TOOL, "deps": ["start"], "with": sleep},
        {"id": "right", "tool": SLEEP_TOOL, "deps": ["start"], "with": sleep},
        {"id": "join", "tool": SLEEP_TOOL, "deps": ["left", "right"]},
    ]
    # The wording: a 100 ms step, then two 100 ms branches (serially 300 ms).
    deep: list[dict[str, Any]] = [{**diamond[0], "with": sleep}, *diamond[1:]]
    rows = []
    cases: list[tuple[str, list[dict[str, Any]], int, float]] = [
        (f"diamond: two {BRANCH_MS} ms branches", diamond, 2 * BRANCH_MS, 1.1 * BRANCH_MS),
        (
            f"diamond: {BRANCH_MS} ms step, then two {BRANCH_MS} ms branches",
            deep,
            3 * BRANCH_MS,
            2.2 * BRANCH_MS,
        ),
    ]
    for label, steps, serial, limit in cases:
        timings = await _timed(_fixed_input(_executor(steps)), bench.diamond_runs)
        p50 = percentile(timings, 0.5) * 1000
        rows.append(
            Row.check(
                f"{label}, p50 of {bench.diamond_runs} runs",
                f"{p50:.1f} ms",
                f"serial: {serial} ms",
                f"≤ {limit:g} ms (branches overlap)",
                p50 <= limit,
            )
        )
    return rows


async def _step_overhead(bench: RunnerBench) -> list[Row]:
    chain: list[dict[str, Any]] = [{"id": "s0", "tool": SLEEP_TOOL}] + [
        {"id": f"s{i}", "tool": SLEEP_TOOL, "deps": [f"s{i - 1}"]} for i in range(1, CHAIN_STEPS)
    ]

    async def bare() -> None:
        # The floor: the same 40 tool calls, each its own task, awaited one after the other.
        step: dict[str, Any] = {"input": {}, "steps": {}, "with": {}}
        for index in range(CHAIN_STEPS):
            await asyncio.create_task(_sleep_tool(step, ToolContext(f"s{index}")))

    floor = percentile(await _timed(bare, bench.chain_runs), 0.5) * 1000 / CHAIN_STEPS
    rows = []
    for label, cache in (
        ("cache off", None),
        ("cache on, every look-up a miss", StepCache(max_entries=100_000)),
    ):
        run = _fresh_inputs(_executor(chain, cache=cache))

        await _timed(run, 20)  # warm-up
        per_step = percentile(await _timed(run, bench.chain_runs), 0.5) * 1000 / CHAIN_STEPS
        rows.append(
            Row.check(
                f"executor overhead per step, {CHAIN_STEPS}-step chain of instant tools, {label}",
                f"{per_step:.3f} ms p50",
                f"bare asyncio task per step: {floor:.3f} ms",
                "≤ 0.3 ms p50",
                per_step <= 0.3,
            )
        )
    return rows


class _InstantLLM:
    """An ``LLMProvider`` answering at once with a fixed text: the LLM tools' own cost."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    @property
    def name(self) -> str:
        return "instant"

    async def complete(
        self,
        *,
        messages: Sequence[Message],
        usage: TokenUsage,
        options: CallOptions = DEFAULT_OPTIONS,
    ) -> str:
        return self.answer

    async def stream(
        self,
        *,
        messages: Sequence[Message],
        usage: TokenUsage,
        options: CallOptions = DEFAULT_OPTIONS,
    ) -> AsyncIterator[str]:
        yield self.answer


class _NoHttp:
    async def post_json(self, *, url: str, payload: Any) -> Any:
        raise AssertionError("the template chain makes no HTTP calls")


async def _template_overhead(bench: RunnerBench) -> list[Row]:
    """What a step's templates and output schema cost: a chain of ``llm.chat`` steps that
    render a system and a prompt template (input, the dep's output, vars) and validate a
    JSON answer against their output schema, over an instant LLM, against the same chain of
    instant tools; the difference per step is the rendering and validation."""
    output = {
        "type": "object",
        "required": ["queue", "score"],
        "properties": {
            "queue": {"enum": ["billing", "bugs", "sales"]},
            "score": {"type": "integer", "minimum": 0},
        },
        "additionalProperties": False,
    }
    templated = {
        "system": "You route support tickets for {{ vars.product }}.",
        "output": output,
    }
    chain: list[dict[str, Any]] = [
        {
            "id": "s0",
            "tool": "llm.chat",
            "with": {**templated, "prompt": "Ticket: {{ input.text }}"},
        }
    ] + [
        {
            "id": f"s{i}",
            "tool": "llm.chat",
            "deps": [f"s{i - 1}"],
            "with": {
                **templated,
                "prompt": f"Ticket: {{{{ input.text }}}}\nBefore: {{{{ steps.s{i - 1}.queue }}}}",
            },
        }
        for i in range(1, CHAIN_STEPS)
    ]
    workflow = _workflow(chain, vars={"product": "Acme Cloud"})
    llm = _InstantLLM('{"queue": "billing", "score": 3}')
    tools = build_tools(llm=llm, http=_NoHttp(), vars=workflow.spec.vars)
    executor = Executor(
        workflow=workflow, digest="sha256:bench", tools=tools, cache=None, step_timeout_s=60
    )
    counter = itertools.count()

    def templated_run() -> Awaitable[object]:
        return executor.run({"text": f"charged twice {next(counter)}"})

    plain_chain = [{**step, "tool": SLEEP_TOOL, "with": {}} for step in chain]
    plain = _fresh_inputs(_executor(plain_chain))
    await _timed(templated_run, 20)  # warm-up: templates and validators compiled once
    await _timed(plain, 20)
    with_templates = percentile(await _timed(templated_run, bench.chain_runs), 0.5)
    without = percentile(await _timed(plain, bench.chain_runs), 0.5)
    added = (with_templates - without) * 1000 / CHAIN_STEPS
    return [
        Row.check(
            f"templates and output schema per step, {CHAIN_STEPS}-step llm.chat chain over an "
            "instant LLM (system + prompt rendered, JSON answer validated)",
            f"{added:.3f} ms p50 added",
            f"{with_templates * 1000 / CHAIN_STEPS:.3f} ms per step against "
            f"{without * 1000 / CHAIN_STEPS:.3f} ms for instant tools",
            "≤ 0.2 ms p50",
            added <= 0.2,
        )
    ]


def _fixed_input(executor: Executor) -> Callable[[], Awaitable[object]]:
    """Runs ``executor`` on the same body each time."""
    return lambda: executor.run({"review": "x"})


def _fresh_inputs(executor: Executor) -> Callable[[], Awaitable[object]]:
    """Runs ``executor`` on a new body each time, so a cache never hits."""
    counter = itertools.count()
    return lambda: executor.run({"review": f"chain {next(counter)}"})


def _inputs(bench: RunnerBench, round_: int) -> list[dict[str, str]]:
    """``cache_calls`` bodies, ``REPEAT_SHARE`` of them repeats of an earlier one.

    A repeat copies a body at least two concurrency windows back, so the original has
    finished (and filled the cache) before its repeat starts.
    """
    rng = random.Random(34 + round_)
    gap = 2 * bench.cache_concurrency
    repeats = set(
        rng.sample(range(gap, bench.cache_calls), round(REPEAT_SHARE * bench.cache_calls))
    )
    bodies: list[dict[str, str]] = []
    for index in range(bench.cache_calls):
        if index in repeats:
            bodies.append(dict(bodies[rng.randrange(0, index - gap + 1)]))
        else:
            bodies.append({"review": f"Review {round_}.{index}: great coffee, slow service"})
    return bodies


def _cache_counts() -> tuple[float, float]:
    hits = REGISTRY.get_sample_value("plnt_step_cache_requests_total", {"result": "hit"}) or 0.0
    misses = REGISTRY.get_sample_value("plnt_step_cache_requests_total", {"result": "miss"}) or 0.0
    return hits, misses


async def _cache(bench: RunnerBench, llm_url: str) -> list[Row]:
    """Throughput without and with the cache, in alternating rounds (each with new bodies
    and an empty cache) so a burst of outside load does not land on one side only."""
    raw = EXAMPLE.read_bytes()
    workflow, digest = parse_workflow(raw), spec_digest(raw)
    connector = aiohttp.TCPConnector(limit=4 * bench.cache_concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        llm = OpenAIChatProvider(session=session, base_url=llm_url, model="fake-model")
        tools = build_tools(
            llm=llm,
            http=AiohttpPoster(session=session, timeout_s=60),
            vars=workflow.spec.vars,
        )

        async def seconds(bodies: list[dict[str, str]], cache: StepCache | None) -> float:
            executor = Executor(
                workflow=workflow, digest=digest, tools=tools, cache=cache, step_timeout_s=60
            )
            queue = iter(bodies)

            async def worker() -> None:
                for body in queue:
                    await executor.run(body)

            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(bench.cache_concurrency)))
            return time.perf_counter() - started

        # Warm-up: open the LLM connections with bodies that never occur below.
        await seconds([{"review": f"warm-up {i}"} for i in range(bench.cache_concurrency)], None)
        hits_before, misses_before = _cache_counts()
        rounds: list[tuple[float, float]] = []  # (calls/s without, calls/s with) per round
        caches = []
        for round_ in range(bench.cache_rounds):
            bodies = _inputs(bench, round_)
            without_s = await seconds(bodies, None)
            caches.append(StepCache(max_entries=4096))
            with_s = await seconds(bodies, caches[-1])
            rounds.append((len(bodies) / without_s, len(bodies) / with_s))
        hits, misses = _cache_counts()
    exported = (hits - hits_before) / max(1.0, hits - hits_before + misses - misses_before)
    counted = sum(c.hits for c in caches) / max(1, sum(c.hits + c.misses for c in caches))
    # The median of the paired ratios: each pair ran back to back, so outside load that
    # comes and goes spoils one pair, not the figure.
    ratio = statistics.median(with_ / without for without, with_ in rounds)
    without = statistics.median(without for without, _ in rounds)
    with_cache = statistics.median(with_ for _, with_ in rounds)
    return [
        Row.check(
            f"step cache: {bench.cache_rounds} rounds of {bench.cache_calls} calls, "
            f"{REPEAT_SHARE:.0%} repeated, concurrency {bench.cache_concurrency}, "
            f"LLM {bench.llm_latency_ms:g} ms fixed (median of paired rounds)",
            f"{with_cache:.0f} calls/s with cache = {ratio:.2f}x",
            f"{without:.0f} calls/s without cache (at most {1 / (1 - REPEAT_SHARE):.2f}x "
            "when hits cost nothing)",
            "≥ 1.4x",
            ratio >= 1.4,
        ),
        Row.check(
            "step cache hit rate, as exported (plnt_step_cache_requests_total)",
            f"{exported:.1%} of look-ups",
            f"{REPEAT_SHARE:.0%} of calls repeat (StepCache.hit_rate {counted:.1%})",
            "exported, equal to the repeat share",
            abs(exported - counted) < 1e-9 and abs(exported - REPEAT_SHARE) < 0.01,
        ),
    ]


async def _flood(tmp: Path, llm_url: str) -> list[Row]:
    env = {
        "PLNT_RUNNER_WORKFLOW_FILE": str(EXAMPLE),
        "PLNT_RUNNER_REVISION": "bench",
        "PLNT_RUNNER_LLM_BASE_URL": llm_url,
        "PLNT_LOG_LEVEL": "warning",
        **{f"PLNT_RUNNER_{key.upper()}": str(value) for key, value in FLOOD_LIMITS.items()},
    }
    with Child.python("plnt_runner", cpu=SUT_CPU, log=tmp / "runner.log", env=env) as runner:
        invoke = Target.post(f"{runner.url}/invoke", b'{"review": "Great service, slow parking"}')
        metrics = Target.get(f"{runner.url}/metrics")
        peak = 0.0
        flood = asyncio.create_task(
            loadgen.burst(invoke, total=FLOOD_CALLS, concurrency=FLOOD_CALLS)
        )
        while not flood.done():
            (scrape,) = await loadgen.sequential(metrics, count=1, warmup=0)
            found = _RUNNER_DEPTH.search(scrape.body)
            peak = max(peak, float(found.group(1)) if found else 0.0)
            await asyncio.sleep(0.005)
        replies = flood.result()
        (scrape,) = await loadgen.sequential(metrics, count=1, warmup=0)
    served = sum(1 for r in replies if r.status == 200)
    refused = sum(1 for r in replies if r.status == 429 and "retry-after" in r.headers)
    capacity = FLOOD_LIMITS["max_in_flight"] + FLOOD_LIMITS["max_queue"]
    gpu_rows = _gpu(scrape.body)
    return [
        Row.check(
            f"runner backpressure: {FLOOD_CALLS} calls at once, max_in_flight "
            f"{FLOOD_LIMITS['max_in_flight']}, max_queue {FLOOD_LIMITS['max_queue']}",
            f"{served} served, {refused} got 429 + Retry-After; queue depth peaked at {peak:g}",
            f"{capacity} admitted, the rest refused",
            "429 when full; plnt_queue_depth shows the queue",
            served + refused == FLOOD_CALLS
            and refused > 0
            and 0 < peak <= FLOOD_LIMITS["max_queue"],
        ),
        *gpu_rows,
    ]


def _gpu(metrics: bytes) -> list[Row]:
    probe = GpuProbe.open()
    sampled = bool(_GPU_SAMPLE.search(metrics))
    if probe is None:
        return [
            Row.check(
                "GPU utilization (NVML)",
                "absent (no GPU): no plnt_gpu_utilization_ratio sample"
                if not sampled
                else "a sample without a GPU",
                "NVML finds no GPU here",
                "absent, not zero",
                not sampled,
            )
        ]
    probe.sample()
    probe.close()
    return [
        Row.check(
            "GPU utilization (NVML)",
            "plnt_gpu_utilization_ratio exported" if sampled else "no sample",
            "NVML finds a GPU",
            "exported when a GPU exists",
            sampled,
        )
    ]
