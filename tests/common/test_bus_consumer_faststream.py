"""A saga service's FastStream app against a real nats-server: its handler runs under
``EventConsumer``'s delivery policy, on the one durable the replicas share."""

import asyncio

from nats.js import api
from test_bus_consumer import deleted_event

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec, Delivery
from plnt_common.bus.service_app import ServiceApp, service_app
from plnt_common.events import Envelope, EventType

SPEC = ConsumerSpec(
    service="fs-test",
    filters=(
        subjects.event_filter(EventType.RUN_DELETED),
        subjects.event_filter(EventType.RUN_READY),
    ),
    backoff_s=(0.05,),
)


class Steps:
    """Fails the first ``failures`` deliveries, then waits for ``release``."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.attempts: list[int] = []
        self.events: list[Envelope] = []
        self.exhausted: list[str] = []
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.finished = asyncio.Event()

    async def handle(self, event: Envelope, delivery: Delivery) -> None:
        self.attempts.append(delivery.attempt)
        if delivery.attempt <= self.failures:
            raise RuntimeError("transient")
        self.events.append(event)
        self.started.set()
        await self.release.wait()
        self.finished.set()

    async def on_exhausted(self, event: Envelope, exc: BaseException) -> None:
        self.exhausted.append(event.name)


async def settled(bus: Bus) -> api.ConsumerInfo:
    """The durable's state once the server has applied the last ack."""
    for _ in range(100):
        info = await bus.js.consumer_info(subjects.STREAM, subjects.durable_name(SPEC.service))
        if info.num_ack_pending == 0 and info.num_pending == 0:
            return info
        await asyncio.sleep(0.05)
    return info


async def test_the_handler_is_retried_with_the_delivery_count_then_acked(bus: Bus) -> None:
    steps = Steps(failures=2)
    steps.release.set()
    event = deleted_event("retried")
    await bus.publish(event)
    stop = asyncio.Event()
    running = asyncio.create_task(service_app(bus, SPEC, emits=(), handlers=steps).run(stop))
    await asyncio.wait_for(steps.finished.wait(), timeout=20)
    stop.set()
    await asyncio.wait_for(running, timeout=10)
    assert steps.attempts == [1, 2, 3]
    assert steps.events == [event]  # decoded by FastStream into the Envelope model
    assert steps.exhausted == []
    info = await settled(bus)
    assert (info.num_ack_pending, info.num_pending) == (0, 0)


async def test_stop_lets_the_running_handler_finish_and_ack(bus: Bus) -> None:
    steps = Steps()
    await bus.publish(deleted_event("drained"))
    stop = asyncio.Event()
    running = asyncio.create_task(service_app(bus, SPEC, emits=(), handlers=steps).run(stop))
    await asyncio.wait_for(steps.started.wait(), timeout=20)
    stop.set()
    await asyncio.sleep(0.3)
    assert not running.done()  # waits for the handler, not cancelled under it
    steps.release.set()
    await asyncio.wait_for(running, timeout=10)
    assert steps.finished.is_set()
    info = await settled(bus)
    assert (info.num_ack_pending, info.num_pending) == (0, 0)


async def test_the_app_binds_the_one_explicit_ack_durable_of_the_service(bus: Bus) -> None:
    steps = Steps()
    steps.release.set()
    await bus.publish(deleted_event("bound"))
    stop = asyncio.Event()
    running = asyncio.create_task(service_app(bus, SPEC, emits=(), handlers=steps).run(stop))
    await asyncio.wait_for(steps.finished.wait(), timeout=20)
    stop.set()
    await asyncio.wait_for(running, timeout=10)
    names = [info.name for info in await bus.js.consumers_info(subjects.STREAM)]
    assert names == [subjects.durable_name(SPEC.service)]
    config = (await settled(bus)).config
    assert config.ack_policy == api.AckPolicy.EXPLICIT
    assert config.max_deliver == -1
    assert sorted(config.filter_subjects or ()) == sorted(SPEC.filters)


async def run_until_finished(app: ServiceApp, steps: Steps) -> None:
    stop = asyncio.Event()
    running = asyncio.create_task(app.run(stop))
    await asyncio.wait_for(steps.finished.wait(), timeout=20)
    stop.set()
    await asyncio.wait_for(running, timeout=10)


async def test_the_handler_gets_the_envelope_the_consumer_decoded_not_a_second_decode(
    bus: Bus,
) -> None:
    steps = Steps()
    steps.release.set()
    await bus.publish(deleted_event("decoded-once"))
    await run_until_finished(service_app(bus, SPEC, emits=(), handlers=steps), steps)
    (event,) = steps.events
    # decode_event validated the typed data and cached it on the instance: a second decode
    # (FastStream's decoder, FastDepends) would hand over a fresh model without it
    assert "typed_data" in event.__dict__


async def test_faststreams_message_carries_the_event_id_as_its_correlation_id(bus: Bus) -> None:
    correlation_ids: list[str] = []

    class Recording(Steps):
        async def handle(self, event: Envelope, delivery: Delivery) -> None:
            correlation_ids.append(app.subscriber.local("message").correlation_id)
            await super().handle(event, delivery)

    steps = Recording()
    steps.release.set()
    event = deleted_event("correlated")
    await bus.publish(event)
    app = service_app(bus, SPEC, emits=(), handlers=steps)
    await run_until_finished(app, steps)
    assert correlation_ids == [event.id]
