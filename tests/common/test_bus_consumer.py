"""The bus against a real nats-server: dedup by Nats-Msg-Id, retries, poison, exhaustion."""

import asyncio
import itertools

import structlog.testing
from nats.js import api

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec, Delivery, EventConsumer
from plnt_common.bus.history import read_dead_letters
from plnt_common.events import Envelope, EventType, RunDeleted, new_event, saga_id


def deleted_event(name: str, generation: int = 1) -> Envelope:
    return new_event(
        EventType.RUN_DELETED,
        RunDeleted(),
        namespace="default",
        name=name,
        sagaid=saga_id("default", name, generation),
        generation=generation,
        source="test",
    )


async def consume_until(
    bus: Bus, spec: ConsumerSpec, handler, on_exhausted, done: asyncio.Event
) -> None:
    stop = asyncio.Event()
    consumer = EventConsumer(bus, spec, handler, on_exhausted)
    task = asyncio.create_task(consumer.run(stop))
    try:
        await asyncio.wait_for(done.wait(), timeout=20)
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)


async def test_publishing_the_same_saga_step_twice_stores_one_message(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    event = deleted_event("a")
    assert await bus.publish(event) is True
    assert await bus.publish(event.model_copy(update={"id": "other"})) is False
    info = await bus.js.stream_info(subjects.STREAM)
    assert info.state.messages == 1
    await bus.close()


async def test_a_failing_handler_is_retried_then_acked(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    await bus.publish(deleted_event("a"))
    attempts: list[int] = []
    attempted_at: list[float] = []
    exhausted_for: list[str] = []  # the consumer swallows a raise here: record it
    done = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        attempts.append(delivery.attempt)
        attempted_at.append(loop.time())
        if delivery.attempt < 3:
            raise RuntimeError("transient")
        done.set()

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        exhausted_for.append(event.name)

    spec = ConsumerSpec(
        service="retry", filters=(subjects.event_filter(EventType.RUN_DELETED),), backoff_s=(0.3,)
    )
    with structlog.testing.capture_logs() as logs:
        await consume_until(bus, spec, handler, exhausted, done)
    assert exhausted_for == []
    assert attempts == [1, 2, 3]
    # each retry comes back after the back-off (the NAK's delay), not at once
    assert [b - a >= 0.3 for a, b in itertools.pairwise(attempted_at)] == [True, True]
    assert [line for line in logs if line["event"] == "consumer.delivery_failed"] == []
    await bus.close()


async def test_a_delivery_that_fails_after_its_handler_is_logged(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    await bus.publish(deleted_event("a"))
    done = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        await bus.nc.close()  # the ack that follows cannot be sent
        done.set()

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        raise AssertionError("must not exhaust")

    spec = ConsumerSpec(service="closing", filters=(subjects.event_filter(EventType.RUN_DELETED),))
    with structlog.testing.capture_logs() as logs:
        await consume_until(bus, spec, handler, exhausted, done)
    failed = [line["error"] for line in logs if line["event"] == "consumer.delivery_failed"]
    assert len(failed) == 1 and failed[0].startswith("ConnectionClosedError")


async def test_exhausted_deliveries_publish_the_failure_and_poison_is_skipped(
    nats_url: str,
) -> None:
    bus = await Bus.open(nats_url, service="test")
    await bus.nc.publish(  # a poison message straight onto the stream's subject
        subjects.event_subject(EventType.RUN_DELETED, "default", "poison"), b"{not json"
    )
    await bus.nc.flush()
    await bus.publish(deleted_event("b"))
    seen: list[str] = []
    exhausted_for: list[str] = []
    done = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        seen.append(event.name)
        raise RuntimeError("always fails")

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        exhausted_for.append(f"{event.name}: {exc}")
        done.set()

    spec = ConsumerSpec(
        service="exhaust",
        filters=(subjects.event_filter(EventType.RUN_DELETED),),
        max_attempts=3,
        backoff_s=(0.05,),
    )
    await consume_until(bus, spec, handler, exhausted, done)
    assert seen == ["b", "b", "b"]
    assert exhausted_for == ["b: always fails"]  # the last attempt's error
    consumer = await bus.js.consumer_info(subjects.STREAM, subjects.durable_name("exhaust"))
    assert consumer.num_ack_pending == 0
    await bus.close()


async def test_a_handler_slower_than_ack_wait_runs_once(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    await bus.publish(deleted_event("slow"))
    runs: list[int] = []
    exhausted_for: list[str] = []  # the consumer swallows a raise here: record it
    done = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        runs.append(delivery.attempt)
        await asyncio.sleep(3.5)  # ack wait is 1.5 s: heartbeats keep the message ours
        done.set()

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        exhausted_for.append(event.name)

    spec = ConsumerSpec(
        service="slow", filters=(subjects.event_filter(EventType.RUN_DELETED),), ack_wait_s=1.5
    )
    await consume_until(bus, spec, handler, exhausted, done)
    assert exhausted_for == []
    await asyncio.sleep(2)
    assert runs == [1]
    await bus.close()


async def test_events_of_one_run_are_handled_in_order_while_runs_overlap(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    for name, generation in (("a", 1), ("a", 2), ("b", 1)):
        await bus.publish(deleted_event(name, generation))
    timeline: list[str] = []
    successors: dict[str, bool] = {}
    exhausted_for: list[str] = []  # the consumer swallows a raise here: record it
    done = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        label = f"{event.name}{event.generation}"
        timeline.append(f"start {label}")
        if label == "a1":
            await asyncio.sleep(0.5)  # a2 must wait for this; b1 must not
        successors[label] = delivery.has_successor()
        timeline.append(f"end {label}")
        if len([t for t in timeline if t.startswith("end")]) == 3:
            done.set()

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        exhausted_for.append(event.name)

    spec = ConsumerSpec(
        service="ordered",
        filters=(subjects.event_filter(EventType.RUN_DELETED),),
        ordered_by_run=True,
    )
    await consume_until(bus, spec, handler, exhausted, done)
    assert exhausted_for == []
    assert timeline.index("end a1") < timeline.index("start a2")
    assert timeline.index("end b1") < timeline.index("end a1")
    # a1 knows a2 waits behind it; the last of each run has nothing behind it
    assert successors == {"a1": True, "a2": False, "b1": False}
    await bus.close()


async def test_a_handler_can_wait_for_the_next_event_of_its_run(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    await bus.publish(deleted_event("c", 1))
    lingering = asyncio.Event()
    saw_successor: list[bool] = []
    handled: list[str] = []
    exhausted_for: list[str] = []  # the consumer swallows a raise here: record it
    done = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        handled.append(f"{event.name}{event.generation}")
        if event.generation == 1:
            lingering.set()
            saw_successor.append(await delivery.successor_within(30.0))
        else:
            done.set()

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        exhausted_for.append(event.name)

    async def publish_next() -> None:
        await lingering.wait()
        await bus.publish(deleted_event("c", 2))

    spec = ConsumerSpec(
        service="linger",
        filters=(subjects.event_filter(EventType.RUN_DELETED),),
        ordered_by_run=True,
    )
    publisher = asyncio.create_task(publish_next())
    await consume_until(bus, spec, handler, exhausted, done)
    assert exhausted_for == []
    await publisher
    # c1 waited, c2's arrival ended the wait (not the 30 s), and c2 ran after it
    assert saw_successor == [True]
    assert handled == ["c1", "c2"]
    await bus.close()


async def test_an_exhausted_event_is_kept_as_a_dead_letter_of_its_run(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    await bus.publish(deleted_event("doomed"))
    done = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        raise RuntimeError("always fails")

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        done.set()

    spec = ConsumerSpec(
        service="dead",
        filters=(subjects.event_filter(EventType.RUN_DELETED),),
        max_attempts=2,
        backoff_s=(0.05,),
    )
    await consume_until(bus, spec, handler, exhausted, done)
    for _ in range(50):  # the server's advisory lands a moment after term()
        letters = await read_dead_letters(bus.js, namespace="default", name="doomed")
        if letters:
            break
        await asyncio.sleep(0.05)
    assert [(d.consumer, d.event.event_type if d.event else None) for d in letters] == [
        ("plnt-dead", EventType.RUN_DELETED)
    ]
    assert letters[0].deliveries == 2
    assert await read_dead_letters(bus.js, namespace="default", name="other") == []
    await bus.close()


def delivery_followed_by(successor: "asyncio.Future[None] | None") -> Delivery:
    return Delivery(msg=None, attempt=1, followed=successor)  # type: ignore[arg-type]


async def test_waiting_for_a_successor_ends_when_it_arrives_or_when_the_time_is_up() -> None:
    loop = asyncio.get_running_loop()
    assert await delivery_followed_by(None).successor_within(1.0) is False  # unordered
    waiting = loop.create_future()
    started = loop.time()
    assert await delivery_followed_by(waiting).successor_within(0.2) is False
    assert 0.15 < loop.time() - started < 1.0
    arriving = loop.create_future()
    loop.call_later(0.3, arriving.set_result, None)
    assert await delivery_followed_by(arriving).successor_within(0.8) is True
    # no time to wait: the answer of the moment, without a wait
    later = loop.create_future()
    loop.call_later(0.05, later.set_result, None)
    assert await delivery_followed_by(later).successor_within(0) is False


async def test_a_failure_that_cannot_be_published_is_tried_again_after_the_last_backoff(
    nats_url: str,
) -> None:
    bus = await Bus.open(nats_url, service="test")
    await bus.publish(deleted_event("unrecorded"))
    exhausted_at: list[float] = []
    exhausted_for: list[str] = []
    done = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        raise RuntimeError("always fails")

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        exhausted_at.append(loop.time())
        exhausted_for.append(event.name)
        if len(exhausted_at) == 1:
            raise ConnectionError("bus down")
        done.set()

    spec = ConsumerSpec(
        service="unrecorded",
        filters=(subjects.event_filter(EventType.RUN_DELETED),),
        max_attempts=1,
        backoff_s=(0.05, 0.1, 0.8),
    )
    with structlog.testing.capture_logs() as logs:
        await consume_until(bus, spec, handler, exhausted, done)
    assert len(exhausted_at) == 2
    assert exhausted_at[1] - exhausted_at[0] >= 0.7  # the last back-off, not the first
    said = [(line["event"], line.get("error")) for line in logs if "exhausted" in line["event"]]
    assert said[:3] == [
        ("handler.exhausted", "always fails"),
        (
            "handler.exhausted_publish_failed",
            "ConnectionError('bus down')",
        ),
        # the step's own reason again, not 'delivery attempts exhausted' (the failure
        # event names why the step failed)
        ("handler.exhausted", "always fails"),
    ]
    # the delivery past the last attempt reports its own event, then is terminated
    assert exhausted_for == ["unrecorded", "unrecorded"]
    assert [line for line in logs if line["event"] == "consumer.delivery_failed"] == []
    info = await bus.js.consumer_info(subjects.STREAM, subjects.durable_name("unrecorded"))
    assert (info.num_ack_pending, info.num_pending) == (0, 0)
    await bus.close()


async def test_the_durable_consumer_is_created_with_the_delivery_rules(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")

    async def never(event: Envelope, delivery: Delivery) -> None:
        raise AssertionError("nothing is delivered here")

    async def never_exhausted(event: Envelope, exc: BaseException) -> None:
        raise AssertionError("nothing is delivered here")

    filters = (
        subjects.event_filter(EventType.RUN_DELETED),
        subjects.event_filter(EventType.RUN_READY),
    )
    for service, concurrency, pending in (("rules-small", 16, 1000), ("rules-wide", 300, 1200)):
        spec = ConsumerSpec(
            service=service, filters=filters, ack_wait_s=7.0, concurrency=concurrency
        )
        await EventConsumer(bus, spec, never, never_exhausted).ensure_consumer()
        config = (await bus.js.consumer_info(subjects.STREAM, f"plnt-{service}")).config
        assert (
            config.durable_name,
            config.filter_subjects,
            config.ack_policy,
            config.deliver_policy,
            config.ack_wait,
            config.max_deliver,
            config.max_ack_pending,
        ) == (
            f"plnt-{service}",
            list(filters),
            api.AckPolicy.EXPLICIT,
            api.DeliverPolicy.ALL,
            7.0,
            -1,  # unlimited: a crash on the last attempt cannot lose the message
            pending,
        )
    await bus.close()


def test_the_back_off_follows_the_attempts_then_stays_at_the_last() -> None:
    spec = ConsumerSpec(service="s", filters=(), backoff_s=(0.1, 0.2, 0.4))
    assert [spec.delay_for(attempt) for attempt in (1, 2, 3, 4, 9)] == [0.1, 0.2, 0.4, 0.4, 0.4]


async def test_more_events_than_the_concurrency_all_get_handled(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    names = [f"many-{i}" for i in range(7)]
    for name in names:
        await bus.publish(deleted_event(name))
    handled: list[str] = []
    done = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        handled.append(event.name)
        if len(handled) == len(names):
            done.set()

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        handled.append(f"exhausted {event.name}")

    spec = ConsumerSpec(
        service="narrow", filters=(subjects.event_filter(EventType.RUN_DELETED),), concurrency=2
    )
    await consume_until(bus, spec, handler, exhausted, done)
    assert sorted(handled) == sorted(names)  # each slot freed when its handler ended
    await bus.close()


async def test_stopping_waits_for_the_handler_in_flight_and_acks_it(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    await bus.publish(deleted_event("in-flight"))
    started = asyncio.Event()
    finished: list[str] = []

    async def handler(event: Envelope, delivery: Delivery) -> None:
        started.set()
        await asyncio.sleep(3.0)  # longer than the feed's own stop (its request's expiry)
        finished.append(event.name)

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        finished.append(f"exhausted {event.name}")

    spec = ConsumerSpec(service="draining", filters=(subjects.event_filter(EventType.RUN_DELETED),))
    stop = asyncio.Event()
    running = asyncio.create_task(EventConsumer(bus, spec, handler, exhausted).run(stop))
    await asyncio.wait_for(started.wait(), timeout=10)
    stop.set()
    await asyncio.wait_for(running, timeout=10)
    assert finished == ["in-flight"]  # run() returned only after the handler ended
    # the ack went out before run() returned; the server applies it on its own consumer
    # loop, so its info may show it a moment later (never after a redelivery: ack_wait is 30 s)
    for _ in range(50):
        consumer = await bus.js.consumer_info(subjects.STREAM, subjects.durable_name("draining"))
        if consumer.num_ack_pending == 0:
            break
        await asyncio.sleep(0.1)
    assert (consumer.num_ack_pending, consumer.ack_floor.stream_seq) == (0, 1)
    assert consumer.num_redelivered == 0
    await bus.close()
