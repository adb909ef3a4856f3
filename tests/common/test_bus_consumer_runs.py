"""Events of one run against a real nats-server: concurrent in a consumer that does not
order them, chained in stream order in one that does, even when a later event arrives
while the chain is running."""

import asyncio

from test_bus_consumer import consume_until, deleted_event

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec, Delivery
from plnt_common.events import Envelope, EventType

DELETED = subjects.event_filter(EventType.RUN_DELETED)


async def never_exhausted(event: Envelope, exc: BaseException) -> None:
    raise AssertionError(f"{event.name}{event.generation} exhausted: {exc!r}")


async def test_a_consumer_that_does_not_order_runs_handles_one_runs_events_at_once(
    bus: Bus,
) -> None:
    for generation in (1, 2):
        await bus.publish(deleted_event("a", generation))
    started: list[str] = []
    overlapped: list[str] = []
    both_started, done = asyncio.Event(), asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        started.append(f"a{event.generation}")
        if len(started) == 2:
            both_started.set()
        try:
            await asyncio.wait_for(both_started.wait(), timeout=3)
            overlapped.append(f"a{event.generation}")
        except TimeoutError:
            pass  # handled alone: the other event of the run waited for this one
        if len(started) == 2:
            done.set()

    spec = ConsumerSpec(service="unordered", filters=(DELETED,))
    await consume_until(bus, spec, handler, never_exhausted, done)
    assert sorted(overlapped) == ["a1", "a2"]


async def test_an_event_arriving_while_its_run_is_handled_waits_for_the_newest(
    bus: Bus,
) -> None:
    for generation in (1, 2):
        await bus.publish(deleted_event("a", generation))
    timeline: list[str] = []
    second_started, done = asyncio.Event(), asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        label = f"a{event.generation}"
        timeline.append(f"start {label}")
        if label == "a2":
            second_started.set()  # a1 is done; a3 is published now
        if label != "a3":
            await asyncio.sleep(0.5)
        timeline.append(f"end {label}")
        if label == "a3":
            done.set()

    async def publish_third() -> None:
        await second_started.wait()
        await bus.publish(deleted_event("a", 3))

    spec = ConsumerSpec(service="chained", filters=(DELETED,), ordered_by_run=True)
    publisher = asyncio.create_task(publish_third())
    await consume_until(bus, spec, handler, never_exhausted, done)
    await publisher
    assert timeline == ["start a1", "end a1", "start a2", "end a2", "start a3", "end a3"]
