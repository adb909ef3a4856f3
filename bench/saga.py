"""The saga's own cost: control-plane overhead per deploy, deploy throughput, replay rate.

Runs the real watcher, puller, smoke and promoter processes and the real installer with
the instant benchmark backend (``bench.instant_backend``), so what is measured is the
bus, the handlers and the projection, not process start-up or smoke traffic.
"""

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

import yaml
from nats.aio.client import Client

from bench.dispatch import ROUNDS as DISPATCH_ROUNDS
from bench.dispatch import dispatch_costs
from bench.hops import hops
from bench.stages import Mark, describe, stage_durations, stored_marks
from bench.stats import percentile
from bench.table import Row, Verdict, render
from plnt_cli.commands import Session, replay
from plnt_cli.supervisor import ManagedProcess
from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.connection import wait_for_jetstream
from plnt_common.bus.history import read_messages
from plnt_common.bus.kv_batch import bucket_stream
from plnt_common.bus.kv_watch import watch_entries
from plnt_common.bus.replay import collector_paused
from plnt_common.bus.replay_workers import worker_count
from plnt_common.errors import SpecInvalid
from plnt_common.events import decode_event
from plnt_common.nats_server import (
    LOCAL_SYNC_INTERVAL,
    NatsCluster,
    free_port,
    free_ports,
    wait_for_port,
)
from plnt_common.resource_store import ResourceStore
from plnt_common.resources import parse_resource
from plnt_testkit.monitored_nats import MonitoredNatsServer, Traffic, traffic_between

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ENDED = re.compile(rb'"phase":"(Ready|Failed|RolledBack)"')
SERVICES = ("watcher", "puller", "smoke", "promoter")
WARM_UP_DEPLOYS = 5


@dataclass
class SagaStack:
    """nats-server, the saga services, the instant installer and the instant runner."""

    data_dir: Path
    replicas: int = 1
    sync_interval: str = LOCAL_SYNC_INTERVAL
    nats_nodes: int = 1
    """3: a local 3-node cluster, every stream and bucket with 3 replicas."""

    @property
    def url(self) -> str:
        return self.nats.url

    def start(self) -> None:
        self.nats: MonitoredNatsServer | NatsCluster
        if self.nats_nodes == 1:
            port, monitor_port = free_ports(2)
            self.nats = MonitoredNatsServer(
                store_dir=self.data_dir / "nats",
                port=port,
                sync_interval=self.sync_interval,
                monitor_port=monitor_port,
            )
            self.nats.start()
        else:
            self.nats = NatsCluster.local(
                self.data_dir / "nats",
                client_ports=free_ports(self.nats_nodes),
                sync_interval=self.sync_interval,
            ).start()
            asyncio.run(wait_for_jetstream(self.nats.url))
        runner_port = free_port()
        env = dict(
            os.environ,
            PLNT_NATS_URL=self.nats.url,
            PLNT_NATS_REPLICAS=str(self.nats_nodes),
            PLNT_LOG_LEVEL="warning",
            PLNT_BENCH_INSTANT_RUNNER_URL=f"http://127.0.0.1:{runner_port}",
            PLNT_WATCHER_DEADLINE_CHECK_INTERVAL_S="5",
        )
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        argvs = [
            ("instant-runner", [sys.executable, "-m", "bench.instant_runner", str(runner_port)])
        ]
        argvs.append(("installer", [sys.executable, "-m", "bench.instant_backend"]))
        for service in SERVICES:
            for replica in range(self.replicas):
                argv = [sys.executable, "-m", "plnt_cli", "serve", service]
                argvs.append((f"{service}-{replica}", argv))
        self.processes = [
            ManagedProcess(name=name, argv=argv, env=env, log_path=logs / f"{name}.log")
            for name, argv in argvs
        ]
        for process in self.processes:
            process.start()
        wait_for_port(runner_port)

    async def wait_ready(self) -> None:
        bus = await Bus.open(self.url, service="bench")
        try:
            for service in (*SERVICES, "installer"):
                while True:
                    try:
                        await bus.js.consumer_info(subjects.STREAM, subjects.durable_name(service))
                        break
                    except Exception:  # not created yet
                        await asyncio.sleep(0.05)
        finally:
            await bus.close()

    def stop(self) -> None:
        for process in self.processes:
            if process.process is not None:
                process.process.terminate()
        for process in self.processes:
            if process.process is None:
                continue
            try:
                process.process.wait(timeout=10)
            except subprocess.TimeoutExpired:  # a service slow to drain: the figures are in
                process.process.kill()
                process.process.wait()
        self.nats.stop()


def run_documents(registry: Path, names: list[str]) -> list[dict[str, Any]]:
    spec = yaml.safe_load(
        (EXAMPLES / "registry" / "review-responder" / "1.2.0" / "workflow.yaml").read_text()
    )
    documents = []
    for name in names:
        spec["metadata"]["name"] = name
        target = registry / name / "1.2.0" / "workflow.yaml"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(spec))
        documents.append(
            {
                "apiVersion": "plnt.work/v1",
                "kind": "WorkflowRun",
                "metadata": {"name": name},
                "spec": {
                    "workflow": {"ref": f"{name}@1.2.0", "registry": registry.as_uri()},
                    "backend": {"cluster": "gpu-cluster-01", "gpuClass": "nvidia.com/h100"},
                    "smokeTest": {"invocations": 1, "p95BudgetMs": 2500},
                },
            }
        )
    return documents


class Harness:
    """One connection that applies WorkflowRuns and follows them to their end.

    Kept open across deploys: a new nats-py connection sets up its reply subscription on
    its first request, a round trip that is the harness's, not the control plane's.
    """

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self._store = ResourceStore(bus)
        self._waiting: dict[str, asyncio.Future[tuple[float, dict[str, Any]]]] = {}
        self._follower: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, url: str) -> "Harness":
        harness = cls(await Bus.open(url, service="bench-apply"))
        backend = yaml.safe_load((EXAMPLES / "backend-local.yaml").read_text())
        await harness._store.apply(parse_resource(backend))
        caught_up = asyncio.get_running_loop().create_future()
        harness._follower = asyncio.create_task(harness._follow(caught_up))
        await caught_up
        return harness

    @property
    def nc(self) -> Client:
        return self._bus.nc

    async def close(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
        await self._bus.close()

    async def deploy(
        self, documents: list[dict[str, Any]]
    ) -> tuple[list[float], float, list[float]]:
        """Apply all at once; (apply→Ready per run, wall time, smoke p50 per run)."""
        loop = asyncio.get_running_loop()
        ended = {d["metadata"]["name"]: loop.create_future() for d in documents}
        self._waiting.update(ended)
        started = time.perf_counter()

        async def apply_one(document: dict[str, Any]) -> float:
            applied_at = time.perf_counter()
            await self._store.apply(parse_resource(document))
            return applied_at

        applied = await asyncio.gather(*(apply_one(d) for d in documents))
        results = await asyncio.wait_for(asyncio.gather(*ended.values()), timeout=600)
        wall = time.perf_counter() - started
        latencies = [at - applied_at for (at, _), applied_at in zip(results, applied, strict=True)]
        smoke_ms = [float(status.get("smoke", {}).get("p50Ms", 0.0)) for _, status in results]
        return latencies, wall, smoke_ms

    async def _follow(self, caught_up: asyncio.Future[None]) -> None:
        # Decodes only the changes that end a run: the harness shares the 2 cores with the
        # stack, and most changes (each status on the way) are not what it waits for.
        async for entry in watch_entries(self._bus.resources):
            if entry is None:
                if not caught_up.done():
                    caught_up.set_result(None)
                continue
            if not entry.value or not ENDED.search(entry.value):
                continue
            stored = json.loads(entry.value)
            waiting = self._waiting.pop(stored["metadata"]["name"], None)
            if waiting is None:
                continue
            status = stored.get("status") or {}
            if status.get("phase") == "Ready":
                waiting.set_result((time.perf_counter(), status))
            else:
                name = stored["metadata"]["name"]
                waiting.set_exception(
                    RuntimeError(f"{name} ended {status['phase']}: {status.get('message')}")
                )


async def deploy(
    url: str, documents: list[dict[str, Any]]
) -> tuple[list[float], float, list[float]]:
    """Apply all at once; (apply→Ready per run, wall time, smoke p50 per run)."""
    harness = await Harness.open(url)
    try:
        return await harness.deploy(documents)
    finally:
        await harness.close()


PROBE_EVERY = 10
"""One-at-a-time deploys between two blocks of the host probe's PINGs."""
PROBE_BLOCK = 60
SETTLE_S = 0.2
"""Quiet before a block of PINGs: a deploy's last acknowledgements land a few ms after
its Ready, and a PING must not queue behind them."""


async def pings(nc: Client, count: int) -> list[float]:
    """``count`` bare NATS round trips (PING, PONG), in seconds."""
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        await nc.flush()
        samples.append(time.perf_counter() - started)
    return samples


async def sequential(
    url: str, documents: list[dict[str, Any]], *, pinged: list[float] | None = None
) -> list[float]:
    """One deploy at a time: apply→Ready minus the smoke invocation, per run.

    ``pinged`` collects a block of PINGs before every ``PROBE_EVERY`` deploys, once the
    stack is quiet: the host's speed moves within a run, and the reference must move with
    the deploys it is the unit of.
    """
    harness = await Harness.open(url)
    overheads = []
    try:
        for index, document in enumerate(documents):
            if pinged is not None and index % PROBE_EVERY == 0:
                await asyncio.sleep(SETTLE_S)
                pinged.extend(await pings(harness.nc, PROBE_BLOCK))
            latencies, _, smoke_ms = await harness.deploy([document])
            overheads.append(latencies[0] - smoke_ms[0] / 1000)
    finally:
        await harness.close()
    return overheads


REPLAY_ROUNDS = 5
PROBE_SAMPLES = 500


async def host_probe(url: str) -> tuple[float, float]:
    """p50 of a bare NATS round trip (PING) and of a KV put, in seconds.

    The absolute saga figures move with the host's speed (docs/benchmarks.md): these two,
    taken on the stack's server just before the deploys, say how fast it ran this time.
    """
    bus = await Bus.open(url, service="bench-probe")
    try:
        kv = await bus.js.create_key_value(bucket="bench-probe", history=1)
        round_trips: list[float] = []
        puts: list[float] = []
        for _ in range(PROBE_SAMPLES):
            round_trips.extend(await pings(bus.nc, 1))
            started = time.perf_counter()
            await kv.put("probe", b"x" * 600)
            puts.append(time.perf_counter() - started)
        await bus.js.delete_key_value("bench-probe")
    finally:
        await bus.close()
    return median(round_trips), median(puts)


async def replay_rates(url: str) -> tuple[int, list[tuple[float, float, float]]]:
    """(events, per round: events/s into the bucket as the watcher left it, into an empty
    one, and of a bare read-and-decode of the same stream).

    The first is the usual case (the projection drifted, or is checked): replay writes only
    keys that differ. The second rebuilds a lost bucket: every key is written. The third is
    the reference: ``plnt replay``'s reader and decoder alone, with the collector paused as
    replay pauses it. Each round measures all three back to back, so a busy moment of the
    machine moves a round's reference with its figures.
    """
    session = await Session.open(url)
    rounds = []
    try:
        for _ in range(REPLAY_ROUNDS):
            events, bare = await read_and_decode(session.bus)
            result = await replay(session)
            kept = result.events / result.seconds
            await session.bus.js.purge_stream(bucket_stream(subjects.RUNS_BUCKET))
            result = await replay(session)
            rounds.append((kept, result.events / result.seconds, events / bare))
    finally:
        await session.close()
    return result.events, rounds


async def read_and_decode(bus: Bus) -> tuple[int, float]:
    """(events, seconds) to read every stored event and decode it, as replay reads them."""
    started = time.perf_counter()
    count = 0
    with collector_paused():
        async for batch in read_messages(bus.nc):
            for _, payload in batch:
                with contextlib.suppress(SpecInvalid):  # a poison message, as replay skips it
                    decode_event(payload)
                count += 1
    return count, time.perf_counter() - started


def _rates(rates: list[float]) -> str:
    """The median, with the rounds' range."""
    return f"{median(rates):,.0f} events/s (rounds: {', '.join(f'{r:,.0f}' for r in rates)})"


MAX_HOP_RATIO = 3.0
MAX_ROUND_TRIPS = 100
MAX_COST_GROWTH = 1.2
MIN_REPLAY_SHARE = 0.8
RATIOS_NOTE = (
    "Each target is a ratio to a reference measured in the same run: absolute times move "
    "with the host by a third or more."
)


def burst_rounds(size: int) -> int:
    """A burst of fewer than 1,000 runs ends within a second, short enough for a busy
    moment of the machine to move it by a fifth: it runs three times, the median kept."""
    return 1 if size >= 1000 else 3


ALWAYS = "always"
"""compose's and the Helm chart's NATS: an fsync after every write (see LOCAL_SYNC_INTERVAL)."""


def deploy_rows(
    stack: SagaStack, registry: Path, *, sequential_runs: int, bursts: tuple[int, ...]
) -> list[Row]:
    """Overhead one deploy at a time in the host's round trips, throughput in bursts and
    how its cost per deploy grows, each row with its reference from this run."""
    if stack.nats_nodes > 1:
        nats = (
            f"a {stack.nats_nodes}-node NATS cluster, {stack.nats_nodes} replicas, "
            f"`sync_interval: {stack.sync_interval}`"
        )
    elif stack.sync_interval == ALWAYS:
        nats = "NATS as compose and the chart run it, `sync_interval: always`"
    else:
        nats = f"plnt up's NATS, `sync_interval: {stack.sync_interval}`"
    ping, put = asyncio.run(host_probe(stack.url))
    tag = f"{stack.nats_nodes}-{stack.sync_interval}-"
    # not counted: each service's first saga step pays one-off costs (code paths and
    # validators run for the first time, connection pools filling)
    warm_up = [f"{tag}warm-{i}" for i in range(WARM_UP_DEPLOYS)]
    asyncio.run(sequential(stack.url, run_documents(registry, warm_up)))
    names = [f"{tag}seq-{i}" for i in range(sequential_runs)]
    monitored = stack.nats if isinstance(stack.nats, MonitoredNatsServer) else None
    before = monitored.traffic() if monitored else {}
    pinged: list[float] = []
    overheads = asyncio.run(sequential(stack.url, run_documents(registry, names), pinged=pinged))
    # the stack's own messages: the server may still list the harness's closing connection
    after = monitored.traffic() if monitored else {}
    services = {f"plnt-{service}" for service in (*SERVICES, "installer")}
    traffic = {name: t for name, t in traffic_between(before, after).items() if name in services}
    overhead = percentile(overheads, 0.5)
    across = median(pinged)
    round_trips = overhead / across
    probe = f"NATS round trip (PING) p50 across the deploys {across * 1e6:.0f} µs"
    rows: list[Row] = [
        Row(
            f"**{nats}**: the host's speed before the deploys, NATS round trip (PING) p50 / "
            f"KV put p50; PING p50 across the deploys ({len(pinged)} PINGs, {PROBE_BLOCK} "
            f"before every {PROBE_EVERY} deploys)",
            f"{ping * 1e6:.0f} / {put * 1e6:.0f} µs; {across * 1e6:.0f} µs",
            "",
            "",
            Verdict.INFO,
        ),
        Row.check(
            "control-plane overhead per deploy (apply → Ready minus the smoke call, instant "
            "backend, one at a time), p50 in the host probe's round trips",
            f"{round_trips:.0f} round trips ({overhead * 1000:.1f} ms; "
            f"p99 {percentile(overheads, 0.99) * 1000:.1f} ms; "
            f"{overhead / ping:.0f} of the PINGs before the deploys)",
            probe,
            "≤ 100 round trips",
            round_trips <= MAX_ROUND_TRIPS,
        ),
    ]
    if traffic:
        rows.append(traffic_row(traffic, sequential_runs))
    rows.append(stages_row(stack.url, set(names), across))
    costs = []
    for size in bursts:
        results = []  # (wall time, apply → Ready per run) per round
        for round_ in range(burst_rounds(size)):
            names = [f"{tag}burst{size}-{round_}-{i}" for i in range(size)]
            latencies, wall, _ = asyncio.run(deploy(stack.url, run_documents(registry, names)))
            results.append((wall, latencies))
        # the median round (an odd number of them), its latencies with it
        wall, latencies = sorted(results, key=lambda result: result[0])[len(results) // 2]
        costs.append(wall / size)
        rounds = (
            f"; median of {len(results)}: {', '.join(f'{size / w:.0f}' for w, _ in results)}"
            if len(results) > 1
            else ""
        )
        rows.append(
            Row(
                f"deploy throughput, {size} WorkflowRuns applied at once",
                f"{size / wall:.0f} deploys/s ({wall / size * 1000:.1f} ms each; "
                f"apply → Ready p50 {percentile(latencies, 0.5):.2f} s{rounds})",
                "",
                "",
                Verdict.INFO,
            )
        )
    growth = costs[-1] / costs[0]
    rows.append(
        Row.check(
            f"cost per deploy, {bursts[-1]} vs {bursts[0]} concurrent runs",
            f"{growth:.2f}x",
            f"{costs[0] * 1000:.1f} ms per deploy at {bursts[0]}",
            f"≤ {MAX_COST_GROWTH}x",
            growth <= MAX_COST_GROWTH,
        )
    )
    return rows


def stages_row(url: str, names: set[str], round_trip: float) -> Row:
    """Where the one-at-a-time deploys' time went, step by step."""

    async def marks() -> list[Mark]:
        bus = await Bus.open(url, service="bench-stages")
        try:
            return await stored_marks(bus.nc, "default", names)
        finally:
            await bus.close()

    return Row(
        "the one-at-a-time deploys by step, p50 between the server's stored marks (the "
        "apply, each step's event, the Ready status), in ms and in the round trips above",
        describe(stage_durations(asyncio.run(marks())), round_trip),
        "",
        "",
        Verdict.INFO,
    )


def traffic_row(traffic: dict[str, Traffic], deploys: int) -> Row:
    """NATS messages per deploy between the server and the stack, in all and per service."""
    sent = sum(t.sent for t in traffic.values()) / deploys
    received = sum(t.received for t in traffic.values()) / deploys
    services = ", ".join(
        f"{name.removeprefix('plnt-')} {t.sent / deploys:.0f}/{t.received / deploys:.0f}"
        for name, t in sorted(traffic.items(), key=lambda item: -item[1].sent)
        if t.sent or t.received
    )
    return Row(
        "NATS messages per deploy in the one-at-a-time deploys (the server's `/connz`), "
        "sent by the services / sent to them",
        f"{sent:.0f} / {received:.0f} ({services})",
        "",
        "",
        Verdict.INFO,
    )


def replay_rows(url: str) -> list[Row]:
    events, rounds = asyncio.run(replay_rates(url))
    bare = [reference for _, _, reference in rounds]
    reference = f"bare read-and-decode: {_rates(bare)}"
    rows = []
    for index, case in ((0, "bucket as the watcher left it"), (1, "into an empty bucket")):
        ratio = median(figures[index] / figures[2] for figures in rounds)
        rows.append(
            Row.check(
                f"plnt replay ({events} events, {worker_count()} fold workers), {case}, median "
                f"of {REPLAY_ROUNDS} rounds, as a share of the same round's bare "
                "read-and-decode (one process)",
                f"{ratio:.1%} ({_rates([figures[index] for figures in rounds])})",
                reference,
                f"≥ {MIN_REPLAY_SHARE:.0%}",
                ratio >= MIN_REPLAY_SHARE,
            )
        )
    return rows


def hop_rows(samples: int) -> list[Row]:
    """The saga hop through a service's FastStream app against the raw JetStream hop."""
    _, acked, saga = asyncio.run(hops(samples))
    raw_p50, saga_p50 = percentile(acked, 0.5), percentile(saga, 0.5)
    ratio = saga_p50 / raw_p50
    return [
        Row.check(
            f"saga hop p50 (Bus.publish → a service app's handler start), {samples} hops",
            f"{ratio:.2f}x ({saga_p50 * 1000:.3f} ms; p99 {percentile(saga, 0.99) * 1000:.3f})",
            f"raw JetStream hop p50 (publish → fetch → ack) {raw_p50 * 1000:.3f} ms "
            f"(p99 {percentile(acked, 0.99) * 1000:.3f})",
            f"≤ {MAX_HOP_RATIO:.0f}x",
            ratio <= MAX_HOP_RATIO,
        )
    ]


DISPATCHED = 2000


def dispatch_rows() -> list[Row]:
    """What FastStream's dispatch adds per message to a saga service's handler call."""
    via_app, direct = asyncio.run(dispatch_costs(DISPATCHED))
    return [
        Row(
            "FastStream's dispatch per message in a service app (parser, decoder, "
            f"middlewares, handler), in process, median of {DISPATCH_ROUNDS} rounds of "
            f"{DISPATCHED}",
            f"{via_app / direct:.1f}x ({via_app * 1e6:.0f} µs)",
            f"decode and call the handler directly: {direct * 1e6:.0f} µs",
            "",
            Verdict.INFO,
        )
    ]


def saga_section(*, sequential_runs: int, bursts: tuple[int, ...], hop_samples: int) -> None:
    """Print the saga table: the hop, overhead per deploy, throughput and its flatness,
    replay; on plnt up's NATS, then the deploy figures again on NATS fsyncing every write."""
    rows = hop_rows(hop_samples) + dispatch_rows()
    for sync_interval in (LOCAL_SYNC_INTERVAL, ALWAYS):
        with tempfile.TemporaryDirectory(prefix="plnt-bench-saga-") as tmp:
            stack = SagaStack(Path(tmp), sync_interval=sync_interval)
            stack.start()
            try:
                asyncio.run(stack.wait_ready())
                rows += deploy_rows(
                    stack,
                    Path(tmp) / "registry",
                    sequential_runs=sequential_runs,
                    bursts=bursts,
                )
                if sync_interval == LOCAL_SYNC_INTERVAL:
                    rows += replay_rows(stack.url)
            finally:
                stack.stop()
    print(render("Saga", rows, note=RATIOS_NOTE))
    print()
