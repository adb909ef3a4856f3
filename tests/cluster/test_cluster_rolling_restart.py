"""A rolling restart of all three nodes (SIGTERM, start, wait until caught up, next)
during a burst of WorkflowRuns."""

import asyncio
from pathlib import Path

import pytest
from cluster_support import BURST, broken_promises, burst_with
from stack_support import Client

from plnt_common.nats_server import NatsCluster
from plnt_testkit.cluster import restart_node, wait_until_replicated

pytestmark = pytest.mark.timeout(300)


async def test_a_burst_survives_a_rolling_restart_of_every_node(
    client: Client, registry: Path, nats_cluster: NatsCluster
) -> None:
    async def roll() -> None:
        for node in nats_cluster.nodes:
            await asyncio.sleep(0.5)
            node.stop()  # SIGTERM: the way an operator restarts a node
            restart_node(node)
            await wait_until_replicated(client.bus.js)

    names = await burst_with(client, registry, "rolling", BURST, asyncio.ensure_future(roll()))
    assert await broken_promises(client.bus, names) == []
