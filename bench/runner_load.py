"""``python -m bench --only runner-load``: one runner process holding many calls in flight.

A runner process (``python -m plnt_runner``, pinned to the system-under-test core) serves
a workflow of one ``llm.chat`` step whose backend is the fake LLM (``bench.fake_llm``,
its own process on the load core) answering every call after a fixed delay. The load is
open loop: all N calls are started at once, whatever the answers do, from one aiohttp
session whose connector holds N connections (no pooling limit in the way), each with a
new body so the step cache never hits. A fresh runner per level, with
``PLNT_RUNNER_MAX_IN_FLIGHT`` at the largest level, so its peak resident set
(``VmHWM`` of ``/proc/<pid>/status``, read before it stops) belongs to that level alone.
"""

import asyncio
import json
import os
import re
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import yaml

from bench.procs import LOAD_CPU, SUT_CPU, Child, cpus_available, pin, unpin
from bench.serving import OutsideLoad, load_average
from bench.stats import percentile
from bench.table import Row, render


@dataclass(frozen=True)
class LoadBench:
    levels: tuple[int, ...] = (100, 300, 1000)
    llm_delay_s: float = 2.0
    rss_target_mb: float = 300.0
    call_timeout_s: float = 60.0


WORKFLOW = {
    "apiVersion": "microagents.dev/v1",
    "kind": "Workflow",
    "metadata": {"name": "bench-load", "version": "1.0.0"},
    "spec": {
        "runtime": {"image": "bench", "entrypoint": "bench"},
        "input": {"type": "object", "properties": {"text": {"type": "string"}}},
        "steps": [
            {
                "id": "answer",
                "tool": "llm.chat",
                "with": {"system": "You answer briefly.", "prompt": "{{ input.text }}"},
            }
        ],
    },
}


@dataclass(frozen=True)
class Level:
    in_flight: int
    latencies_s: list[float]
    failures: Counter[str]
    wall_s: float
    peak_rss_mb: float
    idle_rss_mb: float
    invocation_mean_s: float
    """The runner's own mean time per invocation (``plnt_invocation_duration_seconds``)."""
    step_mean_s: float
    """The runner's mean time of the ``llm.chat`` step: the LLM call from the runner's side."""
    overflows: int
    """Connections the kernel dropped on full accept queues during the N calls."""
    cpu_s: dict[str, float]
    """CPU seconds each process used during the N calls: runner, fake LLM, load generator."""

    @property
    def served(self) -> int:
        return len(self.latencies_s)


def _status_kb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return float(line.split()[1])
    return 0.0


def listen_overflows() -> int:
    """The kernel's count of connections dropped because a listening socket's accept
    queue was full (``TcpExt: ListenOverflows``, machine-wide); each costs its client a
    SYN retransmission, 1 s later."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            return int(dict(zip(names.split(), values.split(), strict=True))["ListenOverflows"])
    return 0


_SUM_COUNT = re.compile(
    rb"^(plnt_invocation_duration_seconds|plnt_step_duration_seconds)_(sum|count)\{[^}]*\} "
    rb"([\d.e+-]+)$",
    re.M,
)


async def _durations(session: aiohttp.ClientSession, url: str) -> dict[tuple[str, str], float]:
    """The runner's own invocation and step histograms' sums and counts (every series)."""
    async with session.get(url) as reply:
        body = await reply.read()
    totals: dict[tuple[str, str], float] = {}
    for name, kind, value in _SUM_COUNT.findall(body):
        key = (name.decode(), kind.decode())
        totals[key] = totals.get(key, 0.0) + float(value)
    return totals


def _mean_s(
    before: dict[tuple[str, str], float], after: dict[tuple[str, str], float], name: str
) -> float:
    count = after.get((name, "count"), 0.0) - before.get((name, "count"), 0.0)
    total = after.get((name, "sum"), 0.0) - before.get((name, "sum"), 0.0)
    return total / count if count else float("nan")


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (0: this process) from ``/proc/<pid>/stat``."""
    stat = Path(f"/proc/{pid or os.getpid()}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _call(
    session: aiohttp.ClientSession, url: str, index: int, failures: Counter[str]
) -> float | None:
    body = json.dumps({"text": f"call {index}: how long is the queue?"}).encode()
    started = time.perf_counter()
    try:
        async with session.post(
            url, data=body, headers={"Content-Type": "application/json"}
        ) as reply:
            data = await reply.read()
            if reply.status == 200:
                return time.perf_counter() - started
            try:
                reason = json.loads(data).get("error", {}).get("reason", "")
            except (ValueError, AttributeError):
                reason = ""
            failures[f"{reply.status} {reason}".strip()] += 1
    except TimeoutError:
        failures["client timeout"] += 1
    except aiohttp.ClientError as exc:
        failures[type(exc).__name__] += 1
    return None


async def _level(tmp: Path, llm: Child, bench: LoadBench, in_flight: int, index: int) -> Level:
    assert llm.process is not None
    workflow = tmp / "workflow.yaml"
    workflow.write_text(yaml.safe_dump(WORKFLOW, sort_keys=False))
    env = {
        "PLNT_RUNNER_WORKFLOW_FILE": str(workflow),
        "PLNT_RUNNER_REVISION": "bench",
        "PLNT_RUNNER_LLM_BASE_URL": llm.url,
        "PLNT_RUNNER_LLM_MODEL": "fake-model",
        "PLNT_RUNNER_MAX_IN_FLIGHT": str(max(bench.levels)),
        "PLNT_LOG_LEVEL": "warning",
    }
    log = tmp / f"runner-{index}.log"
    with Child.python("plnt_runner", cpu=SUT_CPU, log=log, env=env) as runner:
        assert runner.process is not None
        pid = runner.process.pid
        url = f"{runner.url}/invoke"
        connector = aiohttp.TCPConnector(limit=0, force_close=False)
        timeout = aiohttp.ClientTimeout(total=bench.call_timeout_s)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            warm: Counter[str] = Counter()
            for index in range(3):  # the LLM session opened, templates compiled
                await _call(session, url, -1 - index, warm)
            idle = _status_kb(pid, "VmRSS") / 1024
            failures: Counter[str] = Counter()
            pids = {"runner": pid, "fake LLM": llm.process.pid, "load generator": 0}
            cpu_before = {name: _cpu_s(p) for name, p in pids.items()}
            overflows = listen_overflows()
            metrics = f"{runner.url}/metrics"
            histograms = await _durations(session, metrics)
            started = time.perf_counter()
            results = await asyncio.gather(
                *(_call(session, url, index, failures) for index in range(in_flight))
            )
            wall = time.perf_counter() - started
            cpu = {name: _cpu_s(p) - cpu_before[name] for name, p in pids.items()}
            overflows = listen_overflows() - overflows
            after = await _durations(session, metrics)
            invocation = _mean_s(histograms, after, "plnt_invocation_duration_seconds")
            step = _mean_s(histograms, after, "plnt_step_duration_seconds")
        peak = _status_kb(pid, "VmHWM") / 1024
    latencies = [r for r in results if r is not None]
    return Level(in_flight, latencies, failures, wall, peak, idle, invocation, step, overflows, cpu)


async def runner_load_figures(tmp: Path, bench: LoadBench) -> list[Row]:
    fake_llm = Child.python(
        "bench.fake_llm",
        "--latency-ms",
        f"{bench.llm_delay_s * 1000:g}",
        "--backlog",
        str(4 * max(bench.levels)),
        cpu=LOAD_CPU,
        log=tmp / "fake-llm.log",
    )
    rows: list[Row] = []
    with fake_llm:
        pin(0, LOAD_CPU)
        try:
            for index, in_flight in enumerate(bench.levels):
                rows.append(_row(await _level(tmp, fake_llm, bench, in_flight, index), bench))
        finally:
            unpin()
    return rows


def _row(level: Level, bench: LoadBench) -> Row:
    lat = level.latencies_s
    p50 = percentile(lat, 0.5) if lat else float("nan")
    p95 = percentile(lat, 0.95) if lat else float("nan")
    failed = sum(level.failures.values())
    causes = ", ".join(f"{n} {cause}" for cause, n in level.failures.most_common()) or "none"
    throughput = level.served / level.wall_s if level.wall_s else 0.0
    cpu = ", ".join(f"{name} {s:.2f} s" for name, s in level.cpu_s.items())
    ok = level.peak_rss_mb <= bench.rss_target_mb and failed == 0
    return Row.check(
        f"{level.in_flight} calls at once, one llm.chat step, LLM answering in "
        f"{bench.llm_delay_s:g} s",
        f"peak RSS {level.peak_rss_mb:.0f} MB (idle {level.idle_rss_mb:.0f} MB); "
        f"p50 {p50:.2f} s, p95 {p95:.2f} s; {level.served} served, {failed} failed "
        f"({causes}); {throughput:.0f} calls/s over {level.wall_s:.2f} s; "
        f"{level.overflows} connections dropped on a full accept queue; mean latency "
        f"{statistics.fmean(lat) if lat else float('nan'):.2f} s, of which the runner's "
        f"invocation {level.invocation_mean_s:.2f} s, its LLM step {level.step_mean_s:.2f} s",
        f"floor: {bench.llm_delay_s:g} s per call, {level.in_flight / bench.llm_delay_s:.0f} "
        f"calls/s; CPU during the calls: {cpu}",
        f"≤ {bench.rss_target_mb:g} MB RSS, no failure",
        ok,
    )


def steal_s() -> float:
    """CPU time the hypervisor took from this machine so far (``/proc/stat``'s steal)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0


def loaded_section(title: str, note: str, measure: Callable[[], list[Row]]) -> None:
    """Run ``measure`` and print its table with the machine's load beside it: the load
    average before and after, the other processes' share of CPU time and the stolen time."""
    before, stolen, started = load_average(), steal_s(), time.monotonic()
    with OutsideLoad() as outside:
        rows = measure()
    wall, stolen = time.monotonic() - started, steal_s() - stolen
    load = (
        f"Load average (1/5/15 min) before {before}, after {load_average()}; other processes "
        f"used {outside.share:.0%} of the machine's CPU time and the host stole "
        f"{stolen:.1f} s of CPU time over the section's {wall:.0f} s."
    )
    print(render(title, rows, note=f"{note}\n\n{load}") + "\n")


def runner_load_section(bench: LoadBench) -> None:
    pinning = "runner on core 0; fake LLM and load on core 1" if cpus_available() else "not pinned"
    with tempfile.TemporaryDirectory() as tmp:
        loaded_section(
            "Runner under load",
            f"One runner process, `PLNT_RUNNER_MAX_IN_FLIGHT={max(bench.levels)}`, a fresh "
            f"one per level; {pinning}.",
            lambda: asyncio.run(runner_load_figures(Path(tmp), bench)),
        )
