"""The standing pull against a real nats-server: room, request count, stop, restart, re-bind."""

import asyncio
import contextlib
import json
import signal
from collections.abc import AsyncIterator, Callable

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import api

from plnt_common.bus import connect
from plnt_common.bus.durables import PinnedConsumerConfig, pinned
from plnt_common.bus.pull_feed import Pin, PullFeed
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
        self.most_unhandled = 0

    def deliver(self, msg: Msg, release: Callable[[], None]) -> None:
        self.msgs.append(msg)
        self.releases.append(release)
        self.most_unhandled = max(self.most_unhandled, len(self.releases))
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
    client: Client,
    collector: Collector,
    capacity: int = 4,
    consumer: str = CONSUMER,
    expires_s: float = 0.5,
) -> PullFeed:
    return PullFeed(
        client,
        stream=STREAM,
        consumer=consumer,
        capacity=capacity,
        expires_s=expires_s,
        deliver=collector.deliver,
    )


class Tap:
    """The pull requests sent for a consumer, as the server receives them."""

    def __init__(self) -> None:
        self.requests: list[bytes] = []
        self.inboxes: list[str] = []
        self.arrived = asyncio.Event()

    async def take(self, msg: Msg) -> None:
        self.requests.append(msg.data)
        self.inboxes.append(msg.reply)
        self.arrived.set()

    async def wait_for(self, count: int, within_s: float = 5.0) -> None:
        async with asyncio.timeout(within_s):
            while len(self.requests) < count:
                self.arrived.clear()
                await self.arrived.wait()


async def tap_requests(client: Client, consumer: str = CONSUMER) -> Tap:
    """The pull requests sent for ``consumer`` from now on."""
    tap = Tap()
    await client.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{consumer}", cb=tap.take)
    return tap


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
    tap = await tap_requests(js_client)
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
    assert len(tap.requests) <= 100 / 4
    assert collector.most_unhandled <= 16  # and for no more than that


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
    # named apart from a consumer that never was (what the re-bind's log line shows)
    with pytest.raises(ConnectionError, match=r"^the consumer was deleted$"):
        await asyncio.wait_for(running, timeout=5)


async def test_an_unanswering_server_ends_the_feed_and_it_asks_for_nothing_more(
    nats_server: NatsServer, js_client: Client
) -> None:
    tap = await tap_requests(js_client)
    await publish(js_client, 1)
    collector, stop = Collector(), asyncio.Event()
    running = asyncio.create_task(feed_for(js_client, collector).run(stop))
    await collector.wait_for(1)  # taken, and still being handled when the feed ends
    await js_client.flush()  # the request that brought it has reached the tap
    before_the_stall = len(tap.requests)

    assert nats_server.process is not None
    nats_server.process.send_signal(signal.SIGSTOP)  # connected, but nothing answers
    try:
        with pytest.raises(ConnectionError, match=r"^pull requests go unanswered$"):
            await asyncio.wait_for(running, timeout=5)
    finally:
        nats_server.process.send_signal(signal.SIGCONT)
    await js_client.flush()
    await asyncio.sleep(0.2)  # the requests sent while it was stopped reach the tap
    asked = len(tap.requests)
    assert asked - before_the_stall == 1  # the feed gives up on its second unanswered one

    collector.releases.pop(0)()  # the handler finishes after its feed ended
    await js_client.publish(tap.inboxes[-1], b"late")  # an answer to an old request
    await js_client.flush()
    await asyncio.sleep(0.2)
    assert len(tap.requests) == asked  # its inbox is gone: a request would strand messages
    assert len(collector.msgs) == 1  # and nothing sent there is taken any more


async def test_a_missing_consumer_ends_the_feed_at_its_first_request(js_client: Client) -> None:
    feed = feed_for(js_client, Collector(), consumer="never-created")
    # the server answers "no responders" at once: no waiting out request expiries
    with pytest.raises(ConnectionError, match=r"^no consumer answers the pull request$"):
        await asyncio.wait_for(feed.run(asyncio.Event()), timeout=5)


async def test_an_idle_feed_renews_each_expired_request_and_keeps_running(
    js_client: Client,
) -> None:
    tap = await tap_requests(js_client)
    collector, stop = Collector(), asyncio.Event()
    running = asyncio.create_task(feed_for(js_client, collector).run(stop))
    await asyncio.sleep(2.5)  # five expiries of 0.5 s, each answered by the server
    assert not running.done()
    assert len(tap.requests) >= 3  # renewed as each one ended, not once it counted as lost
    await publish(js_client, 1)
    await collector.wait_for(1)
    stop.set()
    await asyncio.wait_for(running, timeout=5)


async def test_a_busy_feed_asks_again_only_once_half_its_room_is_free(js_client: Client) -> None:
    await publish(js_client, 10)
    collector, stop = Collector(), asyncio.Event()
    running = asyncio.create_task(feed_for(js_client, collector).run(stop))
    await collector.wait_for(4)
    await collector.handle(1)  # one slot of four: too little to ask for
    await asyncio.sleep(1.2)
    assert len(collector.msgs) == 4
    await collector.handle(1)  # two of four: asked for and filled
    await collector.wait_for(6)
    stop.set()
    await asyncio.wait_for(running, timeout=5)


async def test_half_the_room_rounds_down_so_a_feed_of_three_refills_one_slot(
    js_client: Client,
) -> None:
    await publish(js_client, 10)
    collector, stop = Collector(), asyncio.Event()
    running = asyncio.create_task(feed_for(js_client, collector, capacity=3).run(stop))
    await collector.wait_for(3)
    await collector.handle(1)
    await collector.wait_for(4)  # while the other two are still being handled
    assert len(collector.releases) == 3
    stop.set()
    await asyncio.wait_for(running, timeout=5)


async def test_a_refused_request_is_asked_again_after_its_expiry_not_at_once(
    js_client: Client,
) -> None:
    narrow = "narrow"  # refuses requests for more than two messages
    config = {"durable_name": narrow, "ack_policy": "explicit", "max_batch": 2}
    created = await js_client.request(  # nats-py's ConsumerConfig has no max_batch
        f"$JS.API.CONSUMER.CREATE.{STREAM}.{narrow}",
        json.dumps({"stream_name": STREAM, "config": config}).encode(),
    )
    assert "error" not in json.loads(created.data)
    tap = await tap_requests(js_client, consumer=narrow)
    collector, stop = Collector(), asyncio.Event()
    running = asyncio.create_task(feed_for(js_client, collector, consumer=narrow).run(stop))
    await asyncio.sleep(1.2)
    stop.set()
    with contextlib.suppress(ConnectionError):  # refused twice: taken for a stale binding
        await asyncio.wait_for(running, timeout=5)
    assert 1 <= len(tap.requests) <= 3  # one per expiry and grace, never a busy loop


async def test_a_request_the_server_forgets_once_is_renewed_and_the_feed_goes_on(
    nats_server: NatsServer, js_client: Client
) -> None:
    tap = await tap_requests(js_client)
    collector, stop = Collector(), asyncio.Event()
    # one slot: the message below ends the successor request, whatever the server's
    # late answers to the forgotten one do
    feed = feed_for(js_client, collector, capacity=1, expires_s=2.0)
    running = asyncio.create_task(feed.run(stop))
    await tap.wait_for(2)  # an expired request was renewed: a fresh one is open
    assert nats_server.process is not None
    nats_server.process.send_signal(signal.SIGSTOP)
    try:
        # the open request counts as lost 2.5 s after it was sent; its successor would
        # count 2.5 s later: the server answers again well in between, on a loaded
        # machine too
        await asyncio.sleep(3.0)
        assert not running.done()
    finally:
        nats_server.process.send_signal(signal.SIGCONT)
    await publish(js_client, 1)
    await collector.wait_for(1)
    assert not running.done()
    stop.set()
    await asyncio.wait_for(running, timeout=5)


async def test_a_feed_stopped_after_its_connection_closed_returns_cleanly(
    js_client: Client,
) -> None:
    collector, stop = Collector(), asyncio.Event()
    running = asyncio.create_task(feed_for(js_client, collector).run(stop))
    await asyncio.sleep(0.2)
    await js_client.close()  # its inbox's subscription went with it
    stop.set()
    await asyncio.wait_for(running, timeout=5)


async def test_a_feed_told_its_pin_moved_pulls_as_a_candidate_and_is_pinned_again(
    js_client: Client,
) -> None:
    # a pin id the server does not hold (the pin moved while this replica was away): the
    # 423 answer clears it, and the next request, without an id, is pinned anew
    js = js_client.jetstream()
    config: PinnedConsumerConfig = pinned(
        api.ConsumerConfig(durable_name="pinned", ack_policy=api.AckPolicy.EXPLICIT),
        timeout_s=5,
    )
    await js.add_consumer(STREAM, config)
    await js.publish("feed.a", b"1")
    collector = Collector()
    pin = Pin(group=config.priority_groups[0] if config.priority_groups else "", id="stale")
    feed = PullFeed(
        js_client,
        stream=STREAM,
        consumer="pinned",
        capacity=4,
        expires_s=0.5,
        deliver=collector.deliver,
        pin=pin,
    )
    stop = asyncio.Event()
    running = asyncio.create_task(feed.run(stop))
    try:
        await collector.wait_for(1)
    finally:
        stop.set()
        await asyncio.wait_for(running, timeout=5)
    assert pin.id not in ("", "stale")
    assert (collector.msgs[0].headers or {}).get("Nats-Pin-Id") == pin.id
