"""PLNT_NATS_URL and --nats with several servers, and replicas a single server cannot keep."""

import os
import subprocess
import sys

import pytest
from nats.aio.client import Client

from plnt_common.bus.connection import connect, server_urls
from plnt_common.bus.provision import ensure_jetstream
from plnt_common.errors import BusUnavailable
from plnt_common.nats_server import NatsServer, free_port


@pytest.mark.parametrize(
    ("url", "servers"),
    [
        ("nats://a:4222", ["nats://a:4222"]),
        ("nats://a:4222,nats://b:4222", ["nats://a:4222", "nats://b:4222"]),
        (" nats://a:4222 , ,nats://b:4222,", ["nats://a:4222", "nats://b:4222"]),
    ],
    ids=["one", "two", "blanks-and-spaces"],
)
def test_a_comma_separated_url_names_each_server(url: str, servers: list[str]) -> None:
    assert server_urls(url) == servers


async def test_a_client_reaches_the_bus_through_any_server_listed(
    nats_server: NatsServer,
) -> None:
    dead = f"nats://127.0.0.1:{free_port()}"
    for url in (f"{dead},{nats_server.url}", f"{nats_server.url},{dead}"):
        nc = await connect(url, name="test")
        try:
            assert nc.connected_url is not None
            assert nc.connected_url.port == nats_server.port
        finally:
            await nc.close()


def test_the_cli_takes_several_servers_in_nats(nats_server: NatsServer) -> None:
    dead = f"nats://127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if k != "PLNT_NATS_URL"}
    done = subprocess.run(
        [sys.executable, "-m", "plnt_cli", "--nats", f"{dead},{nats_server.url}", "get", "wr"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


async def test_more_replicas_than_a_single_server_holds_is_one_clear_error(nc: Client) -> None:
    with pytest.raises(BusUnavailable, match=r"NATS cannot keep 3 replicas \(PLNT_NATS_REPLICAS\)"):
        await ensure_jetstream(nc.jetstream(), replicas=3)
