"""The standing pull against a real nats-server: room, request count, stop, restart, re-bind."""

import asyncio
import signal
from collections.abc import AsyncIterator, Callable

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import api

from plnt_common.bus import connect
from plnt_common.bus.pull_feed import PullFeed
from plnt_common.nats_server import NatsServer

STREAM = "FEED"
CONSUMER = "feed"


@pytest.fixture
async def js_client(nats_url: str) -> AsyncIterator[Client]:
    client = await connect(nats_url, name="test", retry_on_start=True)
    js = client.jetstream()
    await js.add_stream(name=STREAM, subjects=["feed.>"])
    await js.add_consumer(
        STREAM,
        api.ConsumerConfig(
            durable_name=CONSUMER, ack_policy=api.AckPolicy.EXPLICIT, max_ack_pending=1000
        ),
    )
    yield client
    await client.close()


class Collector:
    """Holds what the feed delivers; releases only when told to."""

    def __init__(self) -> None:
        self.msgs: list[Msg] = []
        self.releases: list[Callable[[], None]] = []
        self.arrived = asyncio.Event()

    def deliver(self, msg: Msg, release: Callable[[], None]) -> None:
        self.msgs.append(msg)
        self.releases.append(release)
        self.arrived.set()

    async def handle(self, count: int) -> None:
        for _ in range(count):
            await self.msgs[len(self.msgs) - len(self.releases)].ack()
            self.releases.pop(0)()

    async def wait_for(self, count: int, within_s: float = 10.0) -> None:
        async with asyncio.timeout(within_s):
            while len(self.msgs) < count:
                self.arrived.clear()
                await self.arrived.wait()


def feed_for(
    client: Client, collector: Collector, capacity: int = 4, consumer: str = CONSUMER
) -> PullFeed:
    return PullFeed(
        client,
        stream=STREAM,
        consumer=consumer,
        capacity=capacity,
        expires_s=0.5,
        deliver=collector.deliver,
    )


async def tap_requests(client: Client) -> list[bytes]:
    """The pull requests sent for the consumer from now on, as the server receives them."""
    requests: list[bytes] = []

    async def tap(msg: Msg) -> None:
        requests.append(msg.data)

    await client.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{CONSUMER}", cb=tap)
    return requests


async def publish(client: Client, count: int, start: int = 0) -> None:
    js = client.jetstream()
    for index in range(start, start + count):
        await js.publish(f"feed.{index}", str(index).encode())


async def test_never_more_than_capacity_unhandled_messages(js_client: Client) -> None:
    await publish(js_client, 20)
    collector, stop = Collector(), asyncio.Event()
    running = asyncio.create_task(feed_for(js_client, collector).run(stop))
    await collector.wait_for(4)
    await asyncio.sleep(1.2)  # two expiries: renewed requests must not bring more
    assert len(collector.msgs) == 4
    await collector.handle(2)  # half the room free again: asked for and filled
    await collector.wait_for(6)
    await asyncio.sleep(0.3)
    assert len(collector.msgs) == 6
    assert [msg.data for msg in collector.msgs] == [str(i).encode() for i in range(6)]
    stop.set()
    await asyncio.wait_for(running, timeout=5)


async def test_a_burst_takes_one_pull_request_per_several_messages(js_client: Client) -> None:
    requests = await tap_requests(js_client)
    await publish(js_client, 100)
    collector, stop = Collector(), asyncio.Event()
    running = asyncio.create_task(feed_for(js_client, collector, capacity=16).run(stop))
    async with asyncio.timeout(10):
        while len(collector.msgs) < 100:
            await collector.wait_for(len(collector.msgs) + 1)
            await collector.handle(len(collector.releases))
    stop.set()
    await asyncio.wait_for(running, timeout=5)
    # one message per request would be 100; each request asks for the free room
    assert len(requests) <= 100 / 4


async def test_stop_returns_once_the_open_request_ended_and_loses_nothing(
    js_client: Client,
) -> None:
    collector, stop = Collector(), asyncio.Event()
    running = asyncio.create_task(feed_for(js_client, collector).run(stop))
    await asyncio.sleep(0.2)  # a request is open
    stop.set()
    await publish(js_client, 2)  # may arrive through the still open request: handed on
    await asyncio.wait_for(running, timeout=0.5 + 0.5 + 0.5)
    info = await js_client.jetstream().consumer_info(STREAM, CONSUMER)
    # what the feed took is delivered to the collector; the rest waits for the next feed
    assert info.num_ack_pending == len(collector.msgs)
    assert info.num_pending + len(collector.msgs) == 2


async def test_the_feed_resumes_after_the_server_restarts(
    nats_server: NatsServer, js_client: Client
) -> None:
    collector, stop = Collector(), asyncio.Event()
    running = asyncio.create_task(feed_for(js_client, collector).run(stop))
    await publish(js_client, 1)
    await collector.wait_for(1)
    await collector.handle(1)

    nats_server.stop(kill=True)  # the open pull request dies with it
    nats_server.start()
    async with asyncio.timeout(10):
        while True:  # JetStream takes a moment to recover its store
            try:
                await publish(js_client, 1, start=1)
                break
            except (NatsTimeout, NoRespondersError):
                await asyncio.sleep(0.1)
    await collector.wait_for(2, within_s=5)
    assert not running.done()
    stop.set()
    await asyncio.wait_for(running, timeout=5)


async def test_a_deleted_consumer_ends_the_feed_with_an_error(js_client: Client) -> None:
    collector, stop = Collector(), asyncio.Event()
    running = asyncio.create_task(feed_for(js_client, collector).run(stop))
    await asyncio.sleep(0.2)
    await js_client.jetstream().delete_consumer(STREAM, CONSUMER)
    with pytest.raises(ConnectionError):
        await asyncio.wait_for(running, timeout=5)


async def test_an_unanswering_server_ends_the_feed_and_it_asks_for_nothing_more(
    nats_server: NatsServer, js_client: Client
) -> None:
    requests = await tap_requests(js_client)
    await publish(js_client, 1)
    collector, stop = Collector(), asyncio.Event()
    running = asyncio.create_task(feed_for(js_client, collector).run(stop))
    await collector.wait_for(1)  # taken, and still being handled when the feed ends

    assert nats_server.process is not None
    nats_server.process.send_signal(signal.SIGSTOP)  # connected, but nothing answers
    try:
        with pytest.raises(ConnectionError, match="unanswered"):
            await asyncio.wait_for(running, timeout=5)
    finally:
        nats_server.process.send_signal(signal.SIGCONT)
    await js_client.flush()
    await asyncio.sleep(0.2)  # the requests sent while it was stopped reach the tap
    asked = len(requests)

    collector.releases.pop(0)()  # the handler finishes after its feed ended
    await js_client.flush()
    await asyncio.sleep(0.2)
    assert len(requests) == asked  # its inbox is gone: a request would strand messages


async def test_a_missing_consumer_ends_the_feed_at_its_first_request(js_client: Client) -> None:
    feed = feed_for(js_client, Collector(), consumer="never-created")
    # the server answers "no responders" at once: no waiting out request expiries
    with pytest.raises(ConnectionError, match="no consumer"):
        await asyncio.wait_for(feed.run(asyncio.Event()), timeout=5)
