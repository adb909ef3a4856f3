"""Delivery.defer against a real nats-server: a deferred event comes back after its delay,
holds no slot meanwhile, and its deferrals are not failed attempts."""

import asyncio

import pytest
from test_bus_consumer import consume_until, deleted_event

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec, Delivery
from plnt_common.events import Envelope, EventType

DEFERRALS = 8


@pytest.mark.parametrize("ordered", [False, True])
async def test_deferrals_are_not_attempts_and_real_failures_still_exhaust(
    nats_url: str, ordered: bool
) -> None:
    bus = await Bus.open(nats_url, service="test")
    await bus.publish(deleted_event("waiting"))
    await bus.publish(deleted_event("other"))
    seen: list[tuple[str, int]] = []
    exhausted_for: list[str] = []
    other_handled_while_deferring = asyncio.Event()
    done = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        seen.append((event.name, delivery.attempt))
        if event.name == "other":
            other_handled_while_deferring.set()
            return
        if sum(1 for name, _ in seen if name == "waiting") <= DEFERRALS:
            delivery.defer(0.05)
            return
        raise RuntimeError("a real failure")

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        exhausted_for.append(event.name)
        done.set()

    spec = ConsumerSpec(
        service=f"defer{int(ordered)}",
        filters=(subjects.event_filter(EventType.RUN_DELETED),),
        backoff_s=(0.05,),
        max_attempts=2,
        concurrency=1,
        ordered_by_run=ordered,
    )
    await consume_until(bus, spec, handler, exhausted, done)
    waiting = [attempt for name, attempt in seen if name == "waiting"]
    # every deferred delivery is attempt 1; then two real failures exhaust it, once
    assert waiting == [1] * (DEFERRALS + 1) + [2], waiting
    assert exhausted_for == ["waiting"]
    # with one slot, the deferred event left it free for the other
    assert other_handled_while_deferring.is_set()
    await bus.close()


def test_a_negative_deferral_is_refused_with_its_value() -> None:
    delivery = Delivery(msg=None, attempt=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="-1"):
        delivery.defer(-1)


async def test_a_consumer_started_after_a_deferral_does_not_count_it_as_an_attempt(
    nats_url: str,
) -> None:
    bus = await Bus.open(nats_url, service="test")
    await bus.publish(deleted_event("restarted"))
    spec = ConsumerSpec(
        service="deferrestart",
        filters=(subjects.event_filter(EventType.RUN_DELETED),),
        backoff_s=(0.05,),
        max_attempts=2,
    )
    exhausted_for: list[str] = []

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        exhausted_for.append(event.name)

    deferred = asyncio.Event()
    count = 0

    async def deferring(event: Envelope, delivery: Delivery) -> None:
        nonlocal count
        count += 1
        delivery.defer(0.05)
        if count == 4:
            deferred.set()

    await consume_until(bus, spec, deferring, exhausted, deferred)
    attempts: list[int] = []
    acked = asyncio.Event()

    async def acking(event: Envelope, delivery: Delivery) -> None:
        attempts.append(delivery.attempt)
        acked.set()

    async def exhausted_at_once(event: Envelope, exc: BaseException) -> None:
        await exhausted(event, exc)
        acked.set()  # fail fast: the deferrals were counted as attempts

    await consume_until(bus, spec, acking, exhausted_at_once, acked)
    assert attempts == [1] and exhausted_for == []
    await bus.close()
