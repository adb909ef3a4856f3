"""``python -m bench``: every figure in one run, as markdown tables.

Sections: ``deploy`` (the JetStream hops and apply-to-Ready), ``saga``, ``cluster`` (the
saga on a 3-node NATS beside one node, and leader kills), ``rollback`` (request to the
router serving the kept previous revision), ``router`` (against nginx
and the backend called directly) ``runner`` (the executor, the step cache,
backpressure, GPU metrics), ``runner-load`` (one runner holding 100 to 1,000 calls in
flight against a slow LLM) and ``code-deploy`` (apply → Ready of a workflow with code and
a requirement, first and cached), ``tracing`` (router and executor with tracing off and on),
``placement`` (the installer's choice over 50 backends, placements per second, overcommit),
``failover`` (a spread revision's backend killed under load: calls lost, time to move);
``--only SECTION`` (repeatable) picks some. Each section
starts its own processes on free ports; the machine and versions are printed so the
tables can be pasted into docs/benchmarks.md.
"""

import argparse
import asyncio
import os
import platform
import subprocess
from importlib.metadata import version
from pathlib import Path

from bench.cluster import cluster_section
from bench.code_deploy import code_deploy_section
from bench.deploy import apply_to_ready, embedded_stack
from bench.failover import failover_section
from bench.hops import hops
from bench.placement import placement_section
from bench.rollback import rollback_section
from bench.runner_load import LoadBench, runner_load_section
from bench.saga import saga_section
from bench.serving import add_arguments, serving_sections
from bench.stats import summary_ms
from bench.tracing import tracing_section
from plnt_common.logs import configure_logging
from plnt_common.nats_server import nats_server_binary

SECTIONS = (
    "deploy",
    "saga",
    "cluster",
    "rollback",
    "router",
    "runner",
    "runner-load",
    "code-deploy",
    "tracing",
    "placement",
    "failover",
)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    server = subprocess.run(
        [nats_server_binary(), "--version"], capture_output=True, text=True
    ).stdout.strip()
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, {server}, "
        f"nats-py {version('nats-py')}, aiohttp {version('aiohttp')}, "
        f"pydantic {version('pydantic')}, faststream {version('faststream')}"
    )


async def bus_figures(samples: int) -> list[tuple[str, float, float]]:
    received, acked, saga = await hops(samples)
    return [
        ("raw JetStream hop (publish → fetch → ack)", *summary_ms(acked)),
        ("saga hop (Bus.publish → a service app's handler start)", *summary_ms(saga)),
        ("raw hop to receipt (publish → fetch returns)", *summary_ms(received)),
    ]


def deploy_figures(runs: int) -> list[tuple[str, float, float]]:
    with embedded_stack() as config:
        timings = asyncio.run(apply_to_ready(config.nats_url, config.data_dir, runs))
    return [
        (f"apply → Ready, demo workflow ({runs} runs, 10 smoke invocations)", *summary_ms(timings))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--samples", type=int, default=1000, help="hops measured per bus figure")
    parser.add_argument("--deploys", type=int, default=10, help="apply → Ready runs")
    parser.add_argument(
        "--only",
        action="append",
        choices=SECTIONS,
        help="run only this section (repeatable); default: all of them",
    )
    parser.add_argument("--saga-sequential", type=int, default=30, help="one-at-a-time deploys")
    parser.add_argument(
        "--saga-bursts", default="100,1000", help="WorkflowRuns applied at once, comma separated"
    )
    parser.add_argument(
        "--cluster-kills", type=int, default=10, help="leader kills on the 3-node cluster"
    )
    parser.add_argument("--rollbacks", type=int, default=20, help="rollbacks measured")
    parser.add_argument(
        "--load-levels",
        default="100,300,1000",
        help="runner-load: calls in flight, comma separated",
    )
    parser.add_argument(
        "--llm-delay", type=float, default=2.0, help="runner-load: seconds the fake LLM takes"
    )
    parser.add_argument(
        "--code-deploys", type=int, default=5, help="code-deploy: repetitions, a stack each"
    )
    parser.add_argument(
        "--failover-kills", type=int, default=10, help="failover: backend kills under load"
    )
    add_arguments(parser)
    args = parser.parse_args()
    sections = args.only or list(SECTIONS)
    configure_logging(level="warning", fmt="console")
    print(f"Machine: {machine()}\n")
    if "deploy" in sections:
        deploy_table(args)
    if "saga" in sections:
        bursts = tuple(int(size) for size in args.saga_bursts.split(","))
        saga_section(sequential_runs=args.saga_sequential, bursts=bursts, hop_samples=args.samples)
    if "cluster" in sections:
        cluster_section(
            sequential_runs=args.saga_sequential, bursts=(100, 300), kills=args.cluster_kills
        )
    if "rollback" in sections:
        rollback_section(args.rollbacks)
    serving_sections([s for s in sections if s in ("router", "runner")], args)
    if "runner-load" in sections:
        levels = tuple(int(level) for level in args.load_levels.split(","))
        runner_load_section(LoadBench(levels=levels, llm_delay_s=args.llm_delay))
    if "code-deploy" in sections:
        code_deploy_section(args.code_deploys)
    if "tracing" in sections:
        tracing_section()
    if "placement" in sections:
        placement_section()
    if "failover" in sections:
        failover_section(args.failover_kills)


def deploy_table(args: argparse.Namespace) -> None:
    rows = asyncio.run(bus_figures(args.samples)) + deploy_figures(args.deploys)
    print("### Deploy plane\n")
    print("| figure | p50 (ms) | p99 (ms) |")
    print("|---|---:|---:|")
    for label, p50, p99 in rows:
        print(f"| {label} | {p50:.3f} | {p99:.3f} |")
    raw_p50, saga_p50 = rows[0][1], rows[1][1]
    ratio = saga_p50 / raw_p50
    print(f"\nsaga hop p50 / raw hop p50 = {ratio:.2f} (target ≤ 3)")


if __name__ == "__main__":
    main()
