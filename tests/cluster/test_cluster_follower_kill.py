"""SIGKILL of a follower of the PLNT_EVENTS stream during a burst on a 3-node cluster."""

import asyncio
from pathlib import Path

import pytest
from cluster_support import BURST, broken_promises, burst_with, kill_for_a_while
from stack_support import Client

from plnt_common.nats_server import NatsCluster
from plnt_testkit.cluster import stream_leader, wait_until_replicated

pytestmark = pytest.mark.timeout(300)


async def test_a_burst_survives_a_sigkill_of_a_follower(
    client: Client, registry: Path, nats_cluster: NatsCluster
) -> None:
    leader = await stream_leader(client.bus.js)
    follower = next(node.name for node in nats_cluster.nodes if node.name != leader)
    fault = asyncio.ensure_future(kill_for_a_while(nats_cluster, follower, after_s=0.5))
    names = await burst_with(client, registry, "follower", BURST, fault)
    await wait_until_replicated(client.bus.js)
    assert await broken_promises(client.bus, names) == []
