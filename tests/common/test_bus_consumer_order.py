"""An ordered consumer handles a run's events one at a time in stream order, however
many replicas share its durable, and counts each event's attempts as its own handler
runs (real nats-server)."""

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from test_bus_consumer import deleted_event

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec, Delivery, EventConsumer
from plnt_common.events import Envelope, EventType

Handler = Callable[[Envelope, Delivery], Awaitable[None]]


def ordered_spec(**changes: Any) -> ConsumerSpec:
    spec = ConsumerSpec(
        service="ordered",
        filters=(subjects.event_filter(EventType.RUN_DELETED),),
        ordered_by_run=True,
        backoff_s=(0.3,),
    )
    return dataclasses.replace(spec, **changes)


async def never_exhausted(event: Envelope, exc: BaseException) -> None:
    raise AssertionError(f"{event.name}{event.generation} exhausted: {exc!r}")


async def consume(
    nats_url: str,
    spec: ConsumerSpec,
    handlers: list[Handler],
    done: asyncio.Event,
    *,
    within_s: float,
    on_exhausted: Callable[[Envelope, BaseException], Awaitable[None]] = never_exhausted,
) -> None:
    """One replica (its own connection) per handler on the same durable, until ``done``."""
    buses = [await Bus.open(nats_url, service=f"replica{i}") for i in range(len(handlers))]
    stop = asyncio.Event()
    running = [
        asyncio.create_task(EventConsumer(bus, spec, handler, on_exhausted).run(stop))
        for bus, handler in zip(buses, handlers, strict=True)
    ]
    try:
        await asyncio.wait_for(done.wait(), timeout=within_s)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*running), timeout=15)
        for bus in buses:
            await bus.close()


async def test_two_replicas_never_handle_a_runs_later_event_before_its_failing_first(
    nats_url: str,
) -> None:
    bus = await Bus.open(nats_url, service="test")
    for generation in range(1, 5):
        await bus.publish(deleted_event("a", generation))
        await bus.publish(deleted_event(f"other{generation}", 1))
    await bus.close()
    handled: list[str] = []  # "<replica> <event> <start|end|failed>"
    runs: dict[str, int] = {}
    done = asyncio.Event()

    def replica(label: str) -> Handler:
        async def handler(event: Envelope, delivery: Delivery) -> None:
            name = f"{event.name}{event.generation}"
            runs[name] = runs.get(name, 0) + 1
            handled.append(f"{label} {name} start")
            await asyncio.sleep(0.05)
            if name == "a1" and runs[name] <= 2:  # a KV timeout in an election, twice
                handled.append(f"{label} {name} failed")
                raise RuntimeError("transient")
            handled.append(f"{label} {name} end")
            if sum(1 for line in handled if line.endswith(" end")) == 8:
                done.set()

        return handler

    # both replicas bound before anything is delivered
    await consume(nats_url, ordered_spec(), [replica("A"), replica("B")], done, within_s=30)
    run_a = [line.split(" ", 1)[1] for line in handled if " a" in line]
    assert run_a == [
        "a1 start",
        "a1 failed",
        "a1 start",
        "a1 failed",
        "a1 start",
        "a1 end",
        "a2 start",
        "a2 end",
        "a3 start",
        "a3 end",
        "a4 start",
        "a4 end",
    ], handled
    assert runs == {**{f"a{g}": 1 for g in range(2, 5)}, "a1": 3, **runs_of_others(runs)}


def runs_of_others(runs: dict[str, int]) -> dict[str, int]:
    others = {name: count for name, count in runs.items() if name.startswith("other")}
    assert others == {f"other{g}1": 1 for g in range(1, 5)}
    return others


async def test_an_event_behind_a_retried_one_starts_at_its_own_first_attempt(
    nats_url: str,
) -> None:
    # a1 fails five times before it passes; a2, behind it all that time, then fails once:
    # its first failure is its attempt 1, not 6, so it is retried, not exhausted
    bus = await Bus.open(nats_url, service="test")
    for generation in (1, 2):
        await bus.publish(deleted_event("a", generation))
    await bus.close()
    attempts: dict[str, list[int]] = {"a1": [], "a2": []}
    done = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        name = f"{event.name}{event.generation}"
        attempts[name].append(delivery.attempt)
        if (name == "a1" and delivery.attempt <= 5) or (name == "a2" and delivery.attempt == 1):
            raise RuntimeError("transient")
        if name == "a2":
            done.set()

    spec = ordered_spec(max_attempts=6, backoff_s=(0.1,))
    await consume(nats_url, spec, [handler], done, within_s=20)
    assert attempts == {"a1": [1, 2, 3, 4, 5, 6], "a2": [1, 2]}


async def test_an_event_waiting_behind_a_long_handler_is_not_redelivered_meanwhile(
    nats_url: str,
) -> None:
    # a1 is held 5 s (a step's hold) with a 1 s ack wait; a2 waits behind it: heartbeats
    # keep a2 from coming back every ack wait, so each handler runs once, and nothing is
    # exhausted (the promoter's on_exhausted would restore a healthy canary's route)
    bus = await Bus.open(nats_url, service="test")
    for generation in (1, 2):
        await bus.publish(deleted_event("a", generation))
    await bus.close()
    runs: list[tuple[str, int]] = []
    exhausted: list[str] = []
    done = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        name = f"{event.name}{event.generation}"
        runs.append((name, delivery.attempt))
        if name == "a1":
            await asyncio.sleep(5)
        else:
            done.set()

    async def on_exhausted(event: Envelope, exc: BaseException) -> None:
        exhausted.append(f"{event.name}{event.generation}")

    spec = ordered_spec(ack_wait_s=1.0, max_attempts=2)
    await consume(nats_url, spec, [handler], done, within_s=20, on_exhausted=on_exhausted)
    await asyncio.sleep(1.5)  # a redelivery would come within an ack wait
    assert runs == [("a1", 1), ("a2", 1)]
    assert exhausted == []


async def test_a_pinned_replica_with_no_room_keeps_its_pin_while_its_handler_runs(
    nats_url: str,
) -> None:
    # one slot, busy 5 s with a1, and a 3 s priority timeout: without a pull meanwhile the
    # server would pin the standby, which would take a2 while a1 still runs
    bus = await Bus.open(nats_url, service="test")
    await bus.publish(deleted_event("a", 1))
    await bus.publish(deleted_event("a", 2))
    await bus.close()
    lines: list[str] = []
    done = asyncio.Event()

    def replica(label: str) -> Handler:
        async def handler(event: Envelope, delivery: Delivery) -> None:
            name = f"{event.name}{event.generation}"
            lines.append(f"{name} start")
            if name == "a1":
                await asyncio.sleep(5)
            lines.append(f"{name} end")
            if name == "a2":
                done.set()

        return handler

    spec = ordered_spec(concurrency=1, ack_wait_s=3.0)
    await consume(nats_url, spec, [replica("A"), replica("B")], done, within_s=20)
    assert lines == ["a1 start", "a1 end", "a2 start", "a2 end"]


async def test_a_redelivered_earlier_event_is_not_held_behind_a_later_one_retried_in_place(
    nats_url: str,
) -> None:
    """b1's first delivery ends without its effect (deferred here; a replica that died in
    the real case) and comes back after b2 started; b2 fails until b1's effect is there.
    b1 comes back earlier in the stream than b2, so it runs at once: queued behind b2 it
    would wait until b2 ran out of attempts."""
    bus = await Bus.open(nats_url, service="test")
    for generation in (1, 2):
        await bus.publish(deleted_event("b", generation))
    await bus.close()
    effect = asyncio.Event()
    seen: list[str] = []
    done = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        name = f"{event.name}{event.generation}"
        seen.append(name)
        if name == "b1":
            if seen.count("b1") == 1:
                delivery.defer(0.3)  # back after b2 has started its retries
                return
            effect.set()
            return
        if not effect.is_set():
            raise RuntimeError("b1's effect is not there yet")
        done.set()

    spec = ordered_spec(max_attempts=8, backoff_s=(0.2,))
    await consume(nats_url, spec, [handler], done, within_s=20)
    # b1 came back while b2 was being retried, and b2 passed on its next attempt
    assert seen[:2] == ["b1", "b2"], seen
    assert seen.count("b1") == 2 and seen[-1] == "b2", seen
    assert 2 <= seen.count("b2") < 8, seen
