"""The saga on a 3-node NATS cluster beside one node, and how long a leader kill stops it.

The same stack as the saga section (``bench.saga.SagaStack``: the real services, the
instant installer) on one nats-server and on a local 3-node cluster with every stream
and bucket at 3 replicas, both fsyncing every write as the Helm chart's NATS does. Then,
on the cluster, while deploys keep flowing, the leader of ``PLNT_EVENTS`` is SIGKILLed
``--cluster-kills`` times: each figure is the time from the kill until the stream stores
an event again (the services' publishes and pull requests reached the new leader).
"""

import asyncio
import contextlib
import tempfile
import time
from pathlib import Path

from bench.saga import ALWAYS, Harness, SagaStack, deploy_rows, run_documents
from bench.stats import percentile
from bench.table import Row, Verdict, render
from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.nats_server import NatsCluster
from plnt_testkit.cluster import restart_node, stream_leader, wait_until_replicated

DEPLOY_FLOWS = 4
"""Deploys kept in flight while the leader is killed: the stream always has work."""


async def keep_deploying(harness: Harness, registry: Path, flow: int) -> None:
    for index in range(1_000_000):
        with contextlib.suppress(Exception):  # a deploy across a kill may end late: go on
            await harness.deploy(run_documents(registry, [f"flow{flow}-{index}"]))


async def stored_again(bus: Bus) -> None:
    """Returns once the stream has a leader again and has stored an event since."""
    js = bus.nc.jetstream(timeout=0.5)
    first: int | None = None
    while True:
        try:
            last = (await js.stream_info(subjects.STREAM)).state.last_seq
            if first is None:
                first = last  # the new leader's state: what was stored before the kill
            elif last > first:
                return
        except Exception:  # no leader yet
            pass
        await asyncio.sleep(0.01)


async def leader_kill_recoveries(stack: SagaStack, registry: Path, kills: int) -> list[float]:
    assert isinstance(stack.nats, NatsCluster)
    harness = await Harness.open(stack.url)
    bus = await Bus.open(stack.url, service="bench-kills")
    flows = [
        asyncio.create_task(keep_deploying(harness, registry, flow)) for flow in range(DEPLOY_FLOWS)
    ]
    recoveries: list[float] = []
    try:
        for _ in range(kills):
            await asyncio.sleep(1.0)
            leader = stack.nats.node_named(await stream_leader(bus.js))
            killed_at = time.perf_counter()
            leader.stop(kill=True)
            await stored_again(bus)
            recoveries.append(time.perf_counter() - killed_at)
            restart_node(leader)  # on this (the main) thread: see restart_node
            await wait_until_replicated(bus.js, timeout_s=120)
    finally:
        for flow in flows:
            flow.cancel()
        await asyncio.gather(*flows, return_exceptions=True)
        await bus.close()
        await harness.close()
    return recoveries


def cluster_section(*, sequential_runs: int, bursts: tuple[int, ...], kills: int) -> None:
    rows: list[Row] = []
    recoveries: list[float] = []
    for nodes in (1, 3):
        with tempfile.TemporaryDirectory(prefix="plnt-bench-cluster-") as tmp:
            stack = SagaStack(Path(tmp), sync_interval=ALWAYS, nats_nodes=nodes)
            stack.start()
            try:
                asyncio.run(stack.wait_ready())
                registry = Path(tmp) / "registry"
                rows += deploy_rows(stack, registry, sequential_runs=sequential_runs, bursts=bursts)
                if nodes > 1 and kills:
                    recoveries = asyncio.run(leader_kill_recoveries(stack, registry, kills))
            finally:
                stack.stop()
    if recoveries:
        rows.append(
            Row(
                f"SIGKILL of the PLNT_EVENTS leader until the stream stores events again, "
                f"p50 / max over {len(recoveries)} kills",
                f"{percentile(recoveries, 0.5):.2f} / {max(recoveries):.2f} s "
                f"({', '.join(f'{r:.2f}' for r in recoveries)})",
                "",
                "none: what an election costs",
                Verdict.INFO,
            )
        )
    print(render("Saga on a 3-node NATS cluster", rows))
    print()
