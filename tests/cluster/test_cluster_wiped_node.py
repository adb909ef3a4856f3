"""A node whose store was wiped rejoins the cluster during a burst and catches up."""

import asyncio
from pathlib import Path

import pytest
from cluster_support import BURST, broken_promises, burst_with
from stack_support import Client

from plnt_common.nats_server import NatsCluster
from plnt_testkit.cluster import restart_node, stream_leader, wait_until_replicated

pytestmark = pytest.mark.timeout(300)


async def test_a_node_whose_store_was_wiped_rejoins_and_catches_up(
    client: Client, registry: Path, nats_cluster: NatsCluster
) -> None:
    leader = await stream_leader(client.bus.js)
    wiped = next(node for node in nats_cluster.nodes if node.name != leader)

    async def wipe() -> None:
        await asyncio.sleep(0.5)
        restart_node(wiped, wipe=True)

    names = await burst_with(client, registry, "wiped", BURST, asyncio.ensure_future(wipe()))
    # every stream's replica on the wiped node is current again: it caught up from nothing
    await wait_until_replicated(client.bus.js, timeout_s=90)
    assert await broken_promises(client.bus, names) == []
