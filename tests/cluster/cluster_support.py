"""What the cluster tests do to a JetStream cluster and what they check afterwards."""

import asyncio
import os
import time
from collections import Counter
from pathlib import Path

from stack_support import Client, publish_spec, run_document, workflow_named

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.history import read_events
from plnt_common.bus.replay import replay
from plnt_common.events import EventType
from plnt_common.nats_server import NatsCluster
from plnt_testkit.cluster import restart_node
from plnt_testkit.projections import projection_change, stored_projections, watcher_caught_up

BURST = int(os.environ.get("PLNT_CLUSTER_BURST", "15"))
"""Runs per burst in the default suite; 50 under ``-m slow`` (test_cluster_leader_kill)."""
DOWN_S = 3.0
"""How long a killed node stays down before it starts again."""

SAGA_OF_A_GOOD_RUN = [
    EventType.RUN_REQUESTED,
    EventType.SPEC_PULLED,
    EventType.CANARY_INSTALLED,
    EventType.SMOKE_PASSED,
    EventType.RUN_READY,
]


async def apply_burst(client: Client, registry: Path, names: list[str]) -> None:
    """Apply one run per name, all at once; an apply refused by an election is retried."""
    for name in names:
        publish_spec(registry, workflow_named(name))

    async def apply(name: str) -> None:
        for _ in range(100):
            try:
                await client.apply(run_document(name, registry=registry, smoke_invocations=1))
                return
            except Exception:  # a timeout while the bucket's leader moves: applying is idempotent
                await asyncio.sleep(0.2)
        raise AssertionError(f"{name} could not be applied")

    await asyncio.gather(*(apply(name) for name in names))


async def burst_with(
    client: Client,
    registry: Path,
    prefix: str,
    size: int,
    fault: "asyncio.Future[None]",
) -> list[str]:
    """Apply ``size`` runs at once while ``fault`` runs; returns their names once Ready."""
    names = [f"{prefix}-{i}" for i in range(size)]
    applying = asyncio.create_task(apply_burst(client, registry, names))
    await fault
    await applying
    await wait_all_ready(client, names, timeout_s=90 + 5 * size)
    return names


async def kill_for_a_while(cluster: NatsCluster, name: str, *, after_s: float) -> None:
    """SIGKILL node ``name`` after ``after_s``; ``DOWN_S`` later, start it on its store."""
    await asyncio.sleep(after_s)
    node = cluster.node_named(name)
    node.stop(kill=True)
    await asyncio.sleep(DOWN_S)
    restart_node(node)


async def wait_all_ready(client: Client, names: list[str], *, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    pending = list(names)
    while pending and time.monotonic() < deadline:
        still = []
        for name in pending:
            try:
                status = await client.status(name)
            except Exception:  # an election: ask again
                still.append(name)
                continue
            if status.get("phase") != "Ready":
                still.append(name)
        pending = still
        if pending:
            await asyncio.sleep(0.5)
    phases = {name: (await client.status(name)).get("phase") for name in pending}
    assert not pending, f"not Ready after {timeout_s}s: {phases}"


async def broken_promises(bus: Bus, names: list[str]) -> list[str]:
    """Every way the stream and the projection break the saga's promises; [] when none.

    No event lost: the stream's sequences run 1..N without a gap and N is its message
    count. Each of ``names`` has one saga, with each step's event exactly once and one
    terminal event. The stored projection equals a replay of the stream."""
    problems: list[str] = []
    info = await bus.js.stream_info(subjects.STREAM)
    sequences: list[int] = []
    per_saga: dict[str, Counter[EventType]] = {}
    async for stored in read_events(bus.nc):
        sequences.append(stored.sequence)
        if stored.event is None:
            problems.append(f"sequence {stored.sequence} does not decode: {stored.problem}")
            continue
        per_saga.setdefault(stored.event.sagaid, Counter())[stored.event.event_type] += 1
    if sequences != list(range(1, len(sequences) + 1)):
        missing = sorted(set(range(1, max(sequences, default=0) + 1)) - set(sequences))
        problems.append(f"stream sequences have gaps: missing {missing[:20]}")
    if info.state.last_seq != info.state.messages or info.state.messages != len(sequences):
        problems.append(
            f"last sequence {info.state.last_seq}, messages {info.state.messages}, "
            f"read {len(sequences)}"
        )
    for name in names:
        sagaid = f"default.{name}.1.1"
        kinds = per_saga.get(sagaid, Counter())
        if kinds != Counter(SAGA_OF_A_GOOD_RUN):
            problems.append(f"{sagaid}: {dict(kinds)}")
    for sagaid, kinds in per_saga.items():
        terminals = sum(n for kind, n in kinds.items() if kind.is_terminal)
        if terminals != 1:
            problems.append(f"{sagaid}: {terminals} terminal events")
    await watcher_caught_up(bus.js)  # else a projection may just lag the stream
    before = await stored_projections(bus.nc)
    await replay(bus)
    after = await stored_projections(bus.nc)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if changed:
        problems.append(f"a replay changed the projection of {changed}")
        problems += [projection_change(key, before.get(key), after.get(key)) for key in changed]
    return problems
