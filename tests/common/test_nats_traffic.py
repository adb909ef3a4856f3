"""The server's message counts per connection, which the saga bench reports per deploy."""

import asyncio

from nats.aio.msg import Msg

from plnt_common.bus.bus import Bus
from plnt_testkit.monitored_nats import MonitoredNatsServer, Traffic, traffic_between


async def test_each_message_a_connection_sends_and_is_sent_is_counted_once(
    monitored_server: MonitoredNatsServer,
) -> None:
    watcher = await Bus.open(monitored_server.url, service="watcher")
    puller = await Bus.open(monitored_server.url, service="puller")
    received: list[bytes] = []
    all_received = asyncio.Event()

    async def receive(msg: Msg) -> None:
        received.append(msg.data)
        if len(received) == 5:
            all_received.set()

    await puller.nc.subscribe("echo.>", cb=receive)
    await puller.nc.flush()
    before = await asyncio.to_thread(monitored_server.traffic)
    for index in range(5):
        await watcher.nc.publish(f"echo.{index}", b"x")
    await watcher.nc.flush()
    await asyncio.wait_for(all_received.wait(), timeout=10)
    after = await asyncio.to_thread(monitored_server.traffic)
    await watcher.close()
    await puller.close()

    assert traffic_between(before, after) == {
        "plnt-watcher": Traffic(sent=5, received=0),
        "plnt-puller": Traffic(sent=0, received=5),
    }


def test_a_connection_closed_meanwhile_is_left_out_and_a_new_one_counted_whole() -> None:
    before = {"plnt-smoke": Traffic(3, 4), "plnt-bench": Traffic(10, 10)}
    after = {"plnt-smoke": Traffic(5, 9), "plnt-watcher": Traffic(2, 1)}
    assert traffic_between(before, after) == {
        "plnt-smoke": Traffic(2, 5),
        "plnt-watcher": Traffic(2, 1),
    }
