"""``plnt_dead_letters_total{service,event}``: one per delivery a consumer terminated after
it spent its attempts, against a real nats-server."""

import asyncio

from prometheus_client import REGISTRY

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec, Delivery, EventConsumer
from plnt_common.events import Envelope, EventType, RunDeleted, new_event, saga_id


def dead_letters(service: str, event: str) -> float:
    value = REGISTRY.get_sample_value(
        "plnt_dead_letters_total", {"service": service, "event": event}
    )
    return value or 0.0


async def test_a_delivery_that_spent_its_attempts_is_one_dead_letter_once_its_failure_is_recorded(
    nats_url: str,
) -> None:
    bus = await Bus.open(nats_url, service="test")
    service = "dead-letters"
    before = dead_letters(service, "run.deleted")
    await bus.publish(
        new_event(
            EventType.RUN_DELETED,
            RunDeleted(),
            namespace="default",
            name="doomed",
            sagaid=saga_id("default", "doomed", 1),
            generation=1,
            source="test",
        )
    )
    recorded: list[str] = []
    recorded_twice = asyncio.Event()
    handled = 0

    async def handler(event: Envelope, delivery: Delivery) -> None:
        nonlocal handled
        handled += 1
        raise RuntimeError("never works")

    async def on_exhausted(event: Envelope, exc: BaseException) -> None:
        recorded.append(str(exc))
        if len(recorded) == 2:
            recorded_twice.set()
        if len(recorded) == 1:  # the failure event could not be published: tried again
            raise ConnectionError("bus away")

    spec = ConsumerSpec(
        service=service,
        filters=(subjects.event_filter(EventType.RUN_DELETED),),
        max_attempts=2,
        backoff_s=(0.05,),
    )
    stop = asyncio.Event()
    consumer = EventConsumer(bus, spec, handler, on_exhausted)
    task = asyncio.create_task(consumer.run(stop))
    try:
        await asyncio.wait_for(recorded_twice.wait(), timeout=20)
    finally:
        stop.set()  # the consumer returns once the in-flight delivery is terminated
        await asyncio.wait_for(task, timeout=10)
    assert handled == 2
    assert recorded == ["never works", "never works"]
    assert dead_letters(service, "run.deleted") == before + 1
    await bus.close()
