"""The JetStream hop, raw and through plnt's bus, measured on the same server.

raw:  nats-py ``js.publish`` -> a pull consumer's ``fetch`` returns it -> ``ack``.
saga: ``Bus.publish`` (CloudEvent, Nats-Msg-Id) -> a service's FastStream app (built by
      ``service_app``, as every saga service is) takes it through ``EventConsumer`` and
      FastStream's dispatch to the handler. The clock stops at handler start.
One message in flight at a time, so each sample is a latency, not a throughput share.
"""

import asyncio
import tempfile
import time
from pathlib import Path

from nats.js import api

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec, Delivery
from plnt_common.bus.service_app import service_app
from plnt_common.events import Envelope, EventType, RunDeleted, new_event, saga_id
from plnt_common.nats_server import NatsServer, free_port

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

    class Steps:
        async def handle(self, event: Envelope, delivery: Delivery, /) -> None:
            arrived.put_nowait(time.perf_counter())

        async def on_exhausted(self, event: Envelope, exc: BaseException, /) -> None:
            raise AssertionError(exc)

    spec = ConsumerSpec(
        service="bench-saga", filters=(subjects.event_filter(EventType.RUN_DELETED),)
    )
    stop = asyncio.Event()
    app = service_app(consumer_bus, spec, emits=(), handlers=Steps())
    task = asyncio.create_task(app.run(stop))
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


async def hops(samples: int) -> tuple[list[float], list[float], list[float]]:
    """(raw hop to receipt, raw hop with its ack, saga hop), on one fresh nats-server."""
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(store_dir=Path(tmp), port=free_port()).start()
        try:
            received, acked = await raw_hop(server.url, samples)
            saga = await saga_hop(server.url, samples)
        finally:
            server.stop()
    return received, acked, saga
