"""``python -m bench --only tracing``: what tracing costs the router and the executor.

Router: the real router process twice, tracing off (no ``OTEL_*``) and on (every call
sampled, ``OTEL_TRACES_SAMPLER=always_on``, exporting over OTLP/HTTP to a receiver process
that decodes nothing and answers at once), each in front of the same fast backend.
Sequential kept-alive calls in alternating rounds (direct, off, on); "added" is a router's
p50 minus the direct p50. Executor: the 40-step chain of instant tools, in this process,
first with tracing off, then after ``plnt_common.tracing.setup`` with every span sampled.

``python -m bench.tracing --receive`` is the discarding receiver the section starts.
"""

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import loadgen
from bench.loadgen import Reply, Target
from bench.procs import LOAD_CPU, SUT_CPU, Child, pin, unpin
from bench.router import BODY, _put_routes, _Stack, _wait_until_served
from bench.runner import CHAIN_STEPS, SLEEP_TOOL, _executor, _fresh_inputs, _timed
from bench.serving import OutsideLoad, load_average
from bench.stats import percentile
from bench.table import Row, render
from plnt_common import tracing
from plnt_common.nats_server import NatsServer, free_port, free_ports

ROUTER_TARGET_MS = 0.1
STEP_TARGET_MS = 0.05


@dataclass(frozen=True)
class TracingBench:
    calls: int = 1_000
    """Sequential calls per target and round."""
    rounds: int = 7
    chain_runs: int = 300


async def tracing_figures(tmp: Path, bench: TracingBench) -> list[Row]:
    """The router and executor rows, off and on side by side; starts its own processes."""
    with _receiver(tmp) as receiver_url, _routers(tmp, receiver_url) as (stack, traced_url):
        await _put_routes(stack)
        await _wait_until_served(stack.invoke("router"))
        await _wait_until_served(f"{traced_url}/workflows/bench/invoke")
        pin(0, LOAD_CPU)
        try:
            rows = await _router_rows(stack, traced_url, bench)
        finally:
            unpin()
        pin(0, SUT_CPU)
        try:
            rows += await _step_rows(receiver_url, bench)
        finally:
            unpin()
    return rows


@contextlib.contextmanager
def _receiver(tmp: Path) -> Iterator[str]:
    child = Child.python("bench.tracing", "--receive", cpu=LOAD_CPU, log=tmp / "receiver.log")
    with child:
        yield child.url


@contextlib.contextmanager
def _routers(tmp: Path, receiver_url: str) -> Iterator[tuple[_Stack, str]]:
    nats = NatsServer(store_dir=tmp / "nats", port=free_port()).start()
    try:
        (backend_port,) = free_ports(1)
        backend = Child.python(
            "bench.backends",
            "--serve",
            f"{backend_port}=stable",
            cpu=LOAD_CPU,
            log=tmp / "backend.log",
        )
        quiet = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        traced = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver_url,
            "OTEL_TRACES_SAMPLER": "always_on",
        }
        with (
            backend,
            _router(tmp, nats.url, "router-off", quiet) as off,
            _router(tmp, nats.url, "router-on", {**quiet, **traced}) as on,
        ):
            backend_url = f"http://127.0.0.1:{backend_port}"
            stack = _Stack(
                tmp=tmp,
                nats_url=nats.url,
                stable_url=backend_url,
                canary_url=backend_url,
                router=off,
                nginx=None,
            )
            yield stack, on.url
    finally:
        nats.stop()


def _router(tmp: Path, nats_url: str, name: str, base: dict[str, str]) -> Child:
    env = {
        **base,
        "PLNT_NATS_URL": nats_url,
        "PLNT_ROUTER_HOST": "127.0.0.1",
        "PLNT_ROUTER_PORT": str(free_port()),
        "PLNT_ROUTER_AUTH": "none",
        "PLNT_LOG_LEVEL": "warning",
    }
    child = Child.python("plnt_router", cpu=SUT_CPU, log=tmp / f"{name}.log")
    child.env = env  # exactly this environment: the "off" router must see no OTEL_*
    return child


async def _router_rows(stack: _Stack, traced_url: str, bench: TracingBench) -> list[Row]:
    urls = {
        "direct": stack.invoke("direct"),
        "off": stack.invoke("router"),
        "on": f"{traced_url}/workflows/bench/invoke",
    }
    replies: dict[str, list[Reply]] = {via: [] for via in urls}
    # The cost of tracing is the median over rounds of (on p50 - off p50) within a round:
    # the two routers are measured seconds apart, so a slow spell of the machine moves both.
    differences: list[float] = []
    for _ in range(bench.rounds):
        p50: dict[str, float] = {}
        for via, url in urls.items():
            got = await loadgen.sequential(Target.post(url, BODY), count=bench.calls, warmup=200)
            if any(reply.status != 200 for reply in got):
                raise RuntimeError(f"tracing bench: a call via {via} did not answer 200")
            replies[via] += got
            p50[via] = percentile([r.latency for r in got], 0.5) * 1000
        differences.append(p50["on"] - p50["off"])
    p50 = {via: percentile([r.latency for r in got], 0.5) * 1000 for via, got in replies.items()}
    added_off, added_on = p50["off"] - p50["direct"], p50["on"] - p50["direct"]
    cost = percentile(differences, 0.5)
    calls = len(replies["on"])
    return [
        Row.check(
            f"router added latency p50, sequential ({calls:,} calls each, {bench.rounds} "
            "rounds), tracing off → on",
            f"{added_off:.3f} ms → {added_on:.3f} ms (+{cost:.3f} ms, median of rounds)",
            f"direct p50 {p50['direct']:.3f} ms",
            f"on adds ≤ {ROUTER_TARGET_MS:g} ms",
            cost <= ROUTER_TARGET_MS,
        )
    ]


async def _step_rows(receiver_url: str, bench: TracingBench) -> list[Row]:
    chain: list[dict[str, Any]] = [{"id": "s0", "tool": SLEEP_TOOL}] + [
        {"id": f"s{i}", "tool": SLEEP_TOOL, "deps": [f"s{i - 1}"]} for i in range(1, CHAIN_STEPS)
    ]
    run = _fresh_inputs(_executor(chain))
    per_step = {}
    for mode in ("off", "on"):
        if mode == "on":
            tracing.setup(
                "bench",
                {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver_url, "OTEL_TRACES_SAMPLER": "always_on"},
            )
        await _timed(run, 20)  # warm-up
        timings = await _timed(run, bench.chain_runs)
        per_step[mode] = percentile(timings, 0.5) * 1000 / CHAIN_STEPS
    tracing.shutdown()
    delta = per_step["on"] - per_step["off"]
    return [
        Row.check(
            f"executor overhead per step, {CHAIN_STEPS}-step chain, tracing off → on",
            f"{per_step['off']:.3f} ms → {per_step['on']:.3f} ms (+{delta:.3f} ms)",
            "a span per step, every one sampled and exported",
            f"on adds ≤ {STEP_TARGET_MS:g} ms per step",
            delta <= STEP_TARGET_MS,
        )
    ]


async def _receive() -> None:
    from plnt_testkit.otlp_receiver import OtlpReceiver

    async with OtlpReceiver(discard=True) as receiver:
        print(f"listening on {receiver.endpoint}", flush=True)
        await asyncio.Event().wait()


def tracing_section(bench: TracingBench | None = None) -> None:
    """Run the section and print its table with the load it ran under."""
    before = load_average()
    with tempfile.TemporaryDirectory() as tmp, OutsideLoad() as outside:
        rows = asyncio.run(tracing_figures(Path(tmp), bench or TracingBench()))
    print(f"\nTracing: load average (1/5/15 min) before {before}, after {load_average()}.")
    note = (
        f"Other processes used {outside.share:.0%} of the machine's CPU time during this section."
    )
    print(render("Tracing off and on", rows, note=note) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--receive", action="store_true", help="run the discarding receiver")
    if not parser.parse_args().receive:
        sys.exit("use `python -m bench --only tracing`; --receive runs the receiver")
    asyncio.run(_receive())
