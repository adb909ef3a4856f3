"""SIGKILL of the PLNT_EVENTS stream leader during a burst of WorkflowRuns on a 3-node
cluster (3 replicas): every run Ready, one terminal event per saga, no event lost, the
projection equal to a replay."""

import asyncio
from pathlib import Path

import pytest
from cluster_support import BURST, broken_promises, burst_with, kill_for_a_while
from stack_support import Client

from plnt_common.nats_server import NatsCluster
from plnt_testkit.cluster import stream_leader, wait_until_replicated

pytestmark = pytest.mark.timeout(300)


async def leader_killed_mid_burst(
    client: Client, registry: Path, cluster: NatsCluster, prefix: str, size: int
) -> None:
    leader = await stream_leader(client.bus.js)
    fault = asyncio.ensure_future(kill_for_a_while(cluster, leader, after_s=0.5))
    names = await burst_with(client, registry, prefix, size, fault)
    await wait_until_replicated(client.bus.js)
    assert await broken_promises(client.bus, names) == []


async def test_a_burst_survives_a_sigkill_of_the_event_streams_leader(
    client: Client, registry: Path, nats_cluster: NatsCluster
) -> None:
    await leader_killed_mid_burst(client, registry, nats_cluster, "leader", BURST)


@pytest.mark.slow
@pytest.mark.timeout(600)  # 50 runner processes on 2 cores: minutes when the box is busy
async def test_a_burst_of_fifty_survives_a_sigkill_of_the_event_streams_leader(
    client: Client, registry: Path, nats_cluster: NatsCluster
) -> None:
    await leader_killed_mid_burst(client, registry, nats_cluster, "leader50", 50)
