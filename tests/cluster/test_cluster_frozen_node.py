"""A node frozen by SIGSTOP (a hung process, a partition): its clients leave it within 15 s.

A frozen server keeps its TCP connections open and answers nothing, so only the client's
pings can tell: ``PLNT_NATS_PING_INTERVAL`` (5 s) and ``PLNT_NATS_MAX_OUTSTANDING_PINGS``
(2). With nats-py's defaults (120 s, 2) the services stayed on the frozen node for 6
minutes. Which node each service process is connected to is read from ``/proc``: its
sockets' peers among the cluster's client ports.
"""

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cluster_support import broken_promises, wait_all_ready
from stack_support import Client, publish_spec, run_document, workflow_named

from plnt_cli.supervisor import Supervisor
from plnt_common.bus.bus import Bus
from plnt_common.nats_server import NatsCluster, NatsServer
from plnt_testkit.cluster import wait_until_replicated

pytestmark = pytest.mark.timeout(300)

LEFT_WITHIN_S = 16.0
"""15 s for the third ping to find two unanswered (a pong just before the stop is the
worst case), and the reconnect to another node, which is tried before the frozen one
(``ReconnectOrder``: nats-py's shuffle tried the frozen node first a third of the time,
and waited out its 2 s connect timeout there)."""
SAGA_SERVICES = ("watcher", "puller", "installer", "smoke", "promoter")
ESTABLISHED = "01"


def server_ports(pid: int, ports: set[int]) -> set[int]:
    """Which of ``ports`` (on loopback) process ``pid`` has an established TCP connection to."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if fields[3] == ESTABLISHED and fields[9] in inodes and remote_port in ports:
                found.add(remote_port)
    return found


def connections(stack: Supervisor, cluster: NatsCluster) -> dict[str, set[int]]:
    """The client ports each saga service is connected to now."""
    ports = {node.port for node in cluster.nodes}
    return {
        managed.name: server_ports(managed.pid, ports)
        for managed in stack.services()
        if managed.name in SAGA_SERVICES
    }


async def node_to_freeze(stack: Supervisor, cluster: NatsCluster) -> NatsServer:
    """The node most saga services are connected to."""
    now: dict[str, set[int]] = {}
    for _ in range(100):
        now = connections(stack, cluster)
        if all(len(ports) == 1 for ports in now.values()):
            counts = Counter(port for ports in now.values() for port in ports)
            port, _ = counts.most_common(1)[0]
            return next(node for node in cluster.nodes if node.port == port)
        await asyncio.sleep(0.2)
    raise AssertionError(f"the saga services are not each on one node: {now}")


@pytest.fixture
async def outside_client(
    client: Client, nats_cluster: NatsCluster, stack: Supervisor
) -> AsyncIterator[tuple[Client, NatsServer]]:
    """The node to freeze, and a client of the test's on the two others only."""
    node = await node_to_freeze(stack, nats_cluster)
    others = ",".join(other.url for other in nats_cluster.nodes if other is not node)
    bus = await Bus.open(others, service="test-outside", wait_for_server=True)
    yield Client(bus), node
    await bus.close()


async def leaving_times(
    stack: Supervisor, cluster: NatsCluster, node: NatsServer, on_it: list[str]
) -> dict[str, float]:
    """Seconds until each service of ``on_it`` is connected elsewhere and no longer to
    ``node`` (the node stopped now); ``inf`` for one still there twice the bound later."""
    stopped_at = time.monotonic()
    left: dict[str, float] = {}
    while len(left) < len(on_it) and time.monotonic() - stopped_at < 2 * LEFT_WITHIN_S:
        now = connections(stack, cluster)
        for name in on_it:
            if name not in left and now[name] and node.port not in now[name]:
                left[name] = round(time.monotonic() - stopped_at, 1)
        await asyncio.sleep(0.2)
    return {name: left.get(name, float("inf")) for name in on_it}


async def test_a_frozen_node_is_left_within_fifteen_seconds_and_the_saga_in_flight_ends_once(
    outside_client: tuple[Client, NatsServer],
    registry: Path,
    nats_cluster: NatsCluster,
    stack: Supervisor,
) -> None:
    client, node = outside_client
    on_it = sorted(
        name for name, ports in connections(stack, nats_cluster).items() if node.port in ports
    )
    publish_spec(registry, workflow_named("frozen"))
    await client.apply(run_document("frozen", registry=registry, smoke_invocations=3))
    assert node.process is not None
    os.kill(node.process.pid, signal.SIGSTOP)
    try:
        left = await leaving_times(stack, nats_cluster, node, on_it)
        print(f"left the frozen node after: {left}")
        late = {name: after for name, after in left.items() if after > LEFT_WITHIN_S}
        assert not late, (
            f"{sorted(late)} still on the frozen node {node.name} (or on none) "
            f"{LEFT_WITHIN_S:g}s after it stopped; left after (s): {left}"
        )
        # the saga goes on through the two other nodes while this one stays frozen
        await wait_all_ready(client, ["frozen"], timeout_s=90)
    finally:
        os.kill(node.process.pid, signal.SIGCONT)
    await wait_until_replicated(client.bus.js)
    assert await broken_promises(client.bus, ["frozen"]) == []
