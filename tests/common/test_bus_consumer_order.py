"""An ordered consumer never hands a run's later event on ahead of an earlier one that
failed: the later one comes back after it (real nats-server)."""

import asyncio
import itertools

from nats.aio.msg import Msg
from test_bus_consumer import deleted_event

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import BEHIND_A_RETRY_S, ConsumerSpec, Delivery, EventConsumer
from plnt_common.events import Envelope, EventType


async def test_a_later_event_of_a_run_waits_for_an_earlier_one_that_failed(
    nats_url: str,
) -> None:
    bus = await Bus.open(nats_url, service="test")
    for generation in range(1, 7):  # five later events held behind the same retry
        await bus.publish(deleted_event("a", generation))
    await bus.publish(deleted_event("b", 1))
    handled: list[str] = []
    held_attempts: list[int] = []
    done = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        label = f"{event.name}{event.generation}"
        if label == "a1" and delivery.attempt == 1:
            handled.append("a1 failed")
            raise RuntimeError("transient")  # e.g. a KV write timing out in an election
        handled.append(label)
        if event.name == "a" and event.generation > 1:
            held_attempts.append(delivery.attempt)
        if len(handled) == 8:
            done.set()

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        raise AssertionError(f"{event.name} exhausted: {exc!r}")

    spec = ConsumerSpec(
        service="ordered",
        filters=(subjects.event_filter(EventType.RUN_DELETED),),
        ordered_by_run=True,
        backoff_s=(0.3,),
    )
    stop = asyncio.Event()
    running = asyncio.create_task(EventConsumer(bus, spec, handler, exhausted).run(stop))
    try:
        await asyncio.wait_for(done.wait(), timeout=20)
    finally:
        stop.set()
        await asyncio.wait_for(running, timeout=10)
        await bus.close()
    run_a = [label for label in handled if label.startswith("a")]
    assert run_a == ["a1 failed", "a1", "a2", "a3", "a4", "a5", "a6"]
    # each held event came back after a1's retry, so it was mostly held once: sent back
    # for too early, all would be held again (a second NAK each)
    assert sum(held_attempts) / len(held_attempts) <= 2.5, held_attempts
    assert "b1" in handled  # another run is not held back


def stored_as(sequence: int) -> Msg:
    """A delivery of stream message ``sequence``, as far as the hold reads it."""
    msg = Msg(_client=None, subject="plnt.evt.run.deleted.default.a")  # type: ignore[arg-type]
    msg.reply = f"$JS.ACK.PLNT_EVENTS.ordered.1.{sequence}.{sequence}.1796152995699253160.0"
    return msg


async def test_later_events_held_behind_one_retry_come_back_one_step_apart_in_order() -> None:
    # the NAKed event (sequence 1) comes back in 0.3 s; its run's next five are sent back
    # behind it one step apart, so the server cannot hand two of them on at one moment
    spec = ConsumerSpec(service="ordered", filters=(), ordered_by_run=True)
    consumer = EventConsumer(None, spec, None, None)  # type: ignore[arg-type]
    retried = deleted_event("a", 1)
    consumer._hold_run(retried, stored_as(1), 0.3)
    later = [consumer._behind_a_retry(deleted_event("a", g), stored_as(g)) for g in range(2, 7)]
    delays = [delay for delay in later if delay is not None]
    assert len(delays) == 5
    assert [round(b - a, 3) for a, b in itertools.pairwise(delays)] == [BEHIND_A_RETRY_S] * 4
    assert 0.3 < delays[0] <= 0.3 + BEHIND_A_RETRY_S
    assert consumer._behind_a_retry(retried, stored_as(1)) is None  # the retried one goes on
