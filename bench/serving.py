"""The serving-plane sections of ``python -m bench``: router and runner, as markdown tables.

Each section starts its own processes in a temporary directory and returns its table;
``serving_sections`` runs the ones asked for and prints them with the tool versions and
the machine's load average before and after (other work on the machine makes figures
noisy, so the load belongs next to them).
"""

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from bench.nginx import INSTALL_HINT, nginx_version
from bench.procs import cpus_available
from bench.router import RouterBench, router_figures
from bench.runner import RunnerBench, runner_figures
from bench.table import Row, Verdict, render
from bench.wrk import wrk_version


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("router and runner")
    group.add_argument("--rate", type=float, default=500.0, help="open-loop requests/s")
    group.add_argument(
        "--latency-seconds", type=float, default=10.0, help="measured seconds per latency target"
    )
    group.add_argument("--split-calls", type=int, default=10_000, help="calls for the split")
    group.add_argument("--wrk-seconds", type=int, default=4, help="seconds per wrk run")
    group.add_argument(
        "--cache-calls", type=int, default=RunnerBench.cache_calls, help="calls per cache round"
    )


def load_average() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "unknown"
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


class OutsideLoad:
    """CPU time the rest of the machine used while a block ran: busy time from /proc/stat
    minus what this process and its (waited-for) children used. Other people's work on a
    shared machine makes figures noisy; this says how much of it there was."""

    def __enter__(self) -> "OutsideLoad":
        self._busy, self._ours, self._wall = _machine_busy_s(), _own_cpu_s(), time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.monotonic() - self._wall
        outside = (_machine_busy_s() - self._busy) - (_own_cpu_s() - self._ours)
        self.share: float = max(outside, 0.0) / (wall * (os.cpu_count() or 1)) if wall else 0.0


def _machine_busy_s() -> float:
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return 0.0
    ticks = [int(f) for f in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def serving_sections(sections: list[str], args: argparse.Namespace) -> None:
    """Run and print the router and/or runner sections named in ``sections``."""
    if not sections:
        return
    tables: list[tuple[str, list[Row], float]] = []
    before = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        if "router" in sections:
            bench = RouterBench(
                rate=args.rate,
                seconds=args.latency_seconds,
                split_calls=args.split_calls,
                wrk_seconds=args.wrk_seconds,
            )
            (Path(tmp) / "router").mkdir()
            with OutsideLoad() as outside:
                rows = asyncio.run(router_figures(Path(tmp) / "router", bench))
            tables.append(("Router", rows, outside.share))
        if "runner" in sections:
            (Path(tmp) / "runner").mkdir()
            runner_bench = RunnerBench(cache_calls=args.cache_calls)
            with OutsideLoad() as outside:
                rows = asyncio.run(runner_figures(Path(tmp) / "runner", runner_bench))
            tables.append(("Runner", rows, outside.share))
    after = load_average()
    pinning = "system under test on core 0, load on core 1" if cpus_available() else "not pinned"
    print(f"\nServing plane: {nginx_version()}, {wrk_version()}; {pinning}.")
    print(f"Load average (1/5/15 min) before {before}, after {after}.\n")
    for title, rows, share in tables:
        note = f"Other processes used {share:.0%} of the machine's CPU time during this section."
        print(render(title, rows, note=note) + "\n")
    missed = [row for _, rows, _ in tables for row in rows if row.verdict is Verdict.MISS]
    skipped = [row for _, rows, _ in tables for row in rows if row.verdict is Verdict.SKIPPED]
    _summary(missed, skipped)


def _summary(missed: list[Row], skipped: list[Row]) -> None:
    if skipped:
        print(f"Skipped {len(skipped)} row(s): install the tools with `{INSTALL_HINT}`.")
    if missed:
        print(f"Missed targets: {', '.join(row.figure for row in missed)}.")
    else:
        print("Every measured target is met.")
