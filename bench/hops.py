"""The JetStream hop, raw and through plnt's bus, measured on the same server.

raw:  nats-py ``js.publish`` -> a pull consumer's ``fetch`` returns it -> ``ack``.
saga: ``Bus.publish`` (CloudEvent, Nats-Msg-Id) -> ``EventConsumer`` decodes it and
      starts the handler. The clock stops at handler start, as the issue defines the hop.
One message in flight at a time, so each sample is a latency, not a throughput share.
"""

import asyncio
import time

from nats.js import api

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec, Delivery, EventConsumer
from plnt_common.events import Envelope, EventType, RunDeleted, new_event, saga_id

WARMUP = 50


async def raw_hop(url: str, samples: int) -> tuple[list[float], list[float]]:
    """(publish → fetch returns, publish → fetch → ack) per message."""
    bus = await Bus.open(url, service="bench-raw")
    js = bus.js
    subject = "plnt.evt.bench.raw.x"
    config = api.ConsumerConfig(
        durable_name="bench-raw", filter_subject=subject, ack_policy=api.AckPolicy.EXPLICIT
    )
    await js.add_consumer(subjects.STREAM, config)
    sub = await js.pull_subscribe_bind("bench-raw", subjects.STREAM)
    received, acked = [], []
    for i in range(samples + WARMUP):
        started = time.perf_counter()
        await js.publish(subject, b"x" * 600)
        msgs = await sub.fetch(batch=1, timeout=5)
        got = time.perf_counter()
        await msgs[0].ack_sync()
        if i >= WARMUP:
            received.append(got - started)
            acked.append(time.perf_counter() - started)
    await sub.unsubscribe()
    await bus.close()
    return received, acked


async def saga_hop(url: str, samples: int) -> list[float]:
    publisher = await Bus.open(url, service="bench-pub")
    consumer_bus = await Bus.open(url, service="bench-saga")
    arrived: asyncio.Queue[float] = asyncio.Queue()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        arrived.put_nowait(time.perf_counter())

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        raise AssertionError(exc)

    spec = ConsumerSpec(
        service="bench-saga", filters=(subjects.event_filter(EventType.RUN_DELETED),)
    )
    stop = asyncio.Event()
    task = asyncio.create_task(EventConsumer(consumer_bus, spec, handler, exhausted).run(stop))
    timings = []
    for i in range(samples + WARMUP):
        event = new_event(
            EventType.RUN_DELETED,
            RunDeleted(),
            namespace="bench",
            name="hop",
            sagaid=saga_id("bench", "hop", i + 1),
            generation=i + 1,
            source="bench",
        )
        started = time.perf_counter()
        await publisher.publish(event)
        handled = await asyncio.wait_for(arrived.get(), timeout=5)
        if i >= WARMUP:
            timings.append(handled - started)
    stop.set()
    await task
    await consumer_bus.close()
    await publisher.close()
    return timings
