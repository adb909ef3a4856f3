"""Where a durable starts when it is missing or must be re-created (real nats-server):
after its recorded position, never at the start of the history."""

import asyncio

import pytest
from nats.js import api
from test_bus_consumer import deleted_event

from plnt_common import subjects
from plnt_common.bus import durables
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec, Delivery, EventConsumer
from plnt_common.events import Envelope, EventType


async def handled_by(bus: Bus, spec: ConsumerSpec, *, expected: int) -> list[str]:
    """What the consumer handles until it has handled ``expected`` events, plus 1.5 s."""
    handled: list[str] = []
    enough = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        handled.append(f"{event.name}{event.generation}")
        if len(handled) >= expected:
            enough.set()

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        raise AssertionError(repr(exc))

    stop = asyncio.Event()
    running = asyncio.create_task(EventConsumer(bus, spec, handler, exhausted).run(stop))
    try:
        await asyncio.wait_for(enough.wait(), timeout=20)
        await asyncio.sleep(1.5)  # anything more would come meanwhile
        durable = subjects.durable_name(spec.service)
        for _ in range(50):  # every ack counted before the stop records the floor
            info = await bus.js.consumer_info(subjects.STREAM, durable)
            if info.num_ack_pending == 0 and info.num_pending == 0:
                break
            await asyncio.sleep(0.1)
    finally:
        stop.set()
        await asyncio.wait_for(running, timeout=10)
    return handled


SPEC = ConsumerSpec(service="positioned", filters=(subjects.event_filter(EventType.RUN_DELETED),))


async def test_a_deleted_durable_is_made_again_after_its_recorded_position(
    nats_url: str,
) -> None:
    bus = await Bus.open(nats_url, service="test")
    try:
        for generation in (1, 2, 3):
            await bus.publish(deleted_event("a", generation))
        assert await handled_by(bus, SPEC, expected=3) == ["a1", "a2", "a3"]
        assert await durables.recorded_position(bus, "plnt-positioned") == 3
        # the durable is lost (deleted by hand, or with a server's store), the saga goes on
        await bus.js.delete_consumer(subjects.STREAM, "plnt-positioned")
        await bus.publish(deleted_event("a", 4))
        # only what came after the position: the history is not handed on again
        assert await handled_by(bus, SPEC, expected=1) == ["a4"]
    finally:
        await bus.close()


async def test_an_ordered_durable_made_without_the_pin_is_pinned_from_its_ack_floor(
    nats_url: str,
) -> None:
    bus = await Bus.open(nats_url, service="test")
    try:
        await bus.publish(deleted_event("a", 1))
        await bus.publish(deleted_event("a", 2))
        # an older plnt's durable: no priority group, a1 acknowledged
        await bus.js.add_consumer(
            subjects.STREAM,
            api.ConsumerConfig(
                durable_name="plnt-positioned",
                filter_subjects=list(SPEC.filters),
                ack_policy=api.AckPolicy.EXPLICIT,
            ),
        )
        first = await bus.js.pull_subscribe_bind("plnt-positioned", stream=subjects.STREAM)
        (a1,) = await first.fetch(1, timeout=5)
        await a1.ack_sync()
        await first.unsubscribe()
        ordered = ConsumerSpec(service="positioned", filters=SPEC.filters, ordered_by_run=True)
        assert await handled_by(bus, ordered, expected=1) == ["a2"]
        info = await durables.consumer_info(bus, "plnt-positioned")
        assert info is not None and info["config"]["priority_policy"] == "pinned_client"
    finally:
        await bus.close()


async def test_on_a_server_without_priority_groups_an_ordered_durable_is_left_unpinned(
    nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a server before 2.11 drops the fields: pinning there would re-make it at every bind
    monkeypatch.setattr(durables, "groups_supported", lambda bus: False)
    bus = await Bus.open(nats_url, service="test")
    try:
        await bus.publish(deleted_event("a", 1))
        ordered = ConsumerSpec(service="positioned", filters=SPEC.filters, ordered_by_run=True)
        assert await handled_by(bus, ordered, expected=1) == ["a1"]
        info = await durables.consumer_info(bus, "plnt-positioned")
        assert info is not None and "priority_policy" not in info["config"]
    finally:
        await bus.close()
