"""What a consumer tells an operator (real nats-server): its log lines and their fields,
the saga-step metrics, the context bound to a handler's lines, the fault hook before the
ack, and a re-bind after its durable went away."""

import asyncio
from pathlib import Path

import pytest
import structlog.contextvars
import structlog.testing
from prometheus_client import REGISTRY
from test_bus_consumer import consume_until, deleted_event

from plnt_common import faults, subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec, Delivery, EventConsumer
from plnt_common.errors import BusUnavailable, SpecInvalid
from plnt_common.events import Envelope, EventType, decode_event
from plnt_common.faults import ArmedFaults
from plnt_common.tasks import cancelled

DELETED = subjects.event_filter(EventType.RUN_DELETED)
STEP = EventType.RUN_DELETED.value


async def test_each_retry_and_the_exhaustion_are_logged_with_their_error(bus: Bus) -> None:
    await bus.publish(deleted_event("noisy"))
    done = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        if delivery.attempt == 1:
            raise BusUnavailable("bus down")  # worth another try: no traceback
        raise RuntimeError()  # unexpected and without a message: its repr, a traceback

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        done.set()

    spec = ConsumerSpec(service="noisy", filters=(DELETED,), max_attempts=3, backoff_s=(0.05, 0.1))
    with structlog.testing.capture_logs() as logs:
        await consume_until(bus, spec, handler, exhausted, done)
    retries = [
        (line["error"], line["retryable"], line["delay_s"], line["exc_info"])
        for line in logs
        if line["event"] == "handler.retry"
    ]
    assert retries == [("bus down", True, 0.05, False), ("RuntimeError()", False, 0.1, True)]
    assert [line["error"] for line in logs if line["event"] == "handler.exhausted"] == [
        "RuntimeError()"
    ]


async def test_a_handler_runs_with_its_event_bound_to_its_log_lines(bus: Bus) -> None:
    event = deleted_event("bound", generation=3)
    await bus.publish(event)
    bound: list[dict[str, object]] = []
    done = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        bound.append(structlog.contextvars.get_contextvars())
        done.set()

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        raise AssertionError(f"exhausted: {exc!r}")

    await consume_until(
        bus, ConsumerSpec(service="bound", filters=(DELETED,)), handler, exhausted, done
    )
    assert bound == [
        {
            "sagaid": event.sagaid,
            "event": STEP,
            "namespace": "default",
            "name": "bound",
            "attempt": 1,
        }
    ]


async def test_a_poison_message_is_logged_with_its_subject_and_terminated(bus: Bus) -> None:
    poison_subject = subjects.event_subject(EventType.RUN_DELETED, "default", "poison")
    await bus.nc.publish(poison_subject, b"{not json")
    await bus.nc.flush()
    await bus.publish(deleted_event("after"))
    handled: list[str] = []
    done = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        handled.append(event.name)
        done.set()

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        raise AssertionError(f"exhausted: {exc!r}")

    spec = ConsumerSpec(service="poisoned", filters=(DELETED,))
    with structlog.testing.capture_logs() as logs:
        await consume_until(bus, spec, handler, exhausted, done)
    with pytest.raises(SpecInvalid) as undecodable:
        decode_event(b"{not json")
    poison_lines = [line for line in logs if line["event"] == "consumer.poison_message"]
    assert [(line["subject"], line["error"]) for line in poison_lines] == [
        (poison_subject, str(undecodable.value))
    ]
    assert handled == ["after"]
    info = await bus.js.consumer_info(subjects.STREAM, subjects.durable_name("poisoned"))
    assert (info.num_ack_pending, info.num_redelivered) == (0, 0)  # terminated, not retried


STEP_SAMPLES: tuple[tuple[str, dict[str, str]], ...] = (
    ("plnt_saga_step_duration_seconds_count", {"outcome": "error"}),
    ("plnt_saga_step_duration_seconds_count", {"outcome": "ok"}),
    ("plnt_saga_step_duration_seconds_sum", {"outcome": "ok"}),
    ("plnt_saga_step_runs_total", {}),
)
"""The step metrics of one service and event, without the labels they share."""


def step_samples(service: str) -> list[float]:
    def value(name: str, labels: dict[str, str]) -> float:
        shared = {"service": service, ("event" if "duration" in name else "step"): STEP}
        return REGISTRY.get_sample_value(name, {**shared, **labels}) or 0.0

    return [value(name, labels) for name, labels in STEP_SAMPLES]


async def test_each_step_is_timed_by_outcome_and_counted_once_it_completes(bus: Bus) -> None:
    await bus.publish(deleted_event("timed"))
    before = step_samples("timed")  # the registry is the process's: compare with it
    done = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        if delivery.attempt == 1:
            raise RuntimeError("transient")
        await asyncio.sleep(0.3)
        done.set()

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        raise AssertionError(f"exhausted: {exc!r}")

    spec = ConsumerSpec(service="timed", filters=(DELETED,), backoff_s=(0.05,))
    await consume_until(bus, spec, handler, exhausted, done)
    errors, oks, ok_seconds, runs = (
        after - earlier for after, earlier in zip(step_samples("timed"), before, strict=True)
    )
    assert (errors, oks, runs) == (1, 1, 1)  # a failed body is timed, not counted as run
    assert 0.3 <= ok_seconds < 5.0


async def test_an_armed_before_ack_point_parks_the_step_unacked_under_the_armed_ack_wait(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    armed = ArmedFaults(frozenset({("parked", STEP, "before_ack")}), tmp_path, ack_wait_s=4.0)
    monkeypatch.setattr(faults, "_armed", armed)
    await bus.publish(deleted_event("parked"))
    handled = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        handled.set()

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        raise AssertionError(f"exhausted: {exc!r}")

    consumer = EventConsumer(
        bus, ConsumerSpec(service="parked", filters=(DELETED,)), handler, exhausted
    )
    running = asyncio.create_task(consumer.run(asyncio.Event()))
    try:
        await asyncio.wait_for(handled.wait(), timeout=10)
        marker = tmp_path / f"parked.{STEP}.before_ack"
        for _ in range(50):
            if marker.exists():
                break
            await asyncio.sleep(0.05)
        assert marker.exists()
        info = await bus.js.consumer_info(subjects.STREAM, subjects.durable_name("parked"))
        assert (info.config.ack_wait, info.num_ack_pending) == (4.0, 1)
    finally:  # the parked step never returns: a stop would wait for it
        await cancelled(running)


async def test_a_durable_deleted_under_the_consumer_is_bound_again_and_logged(bus: Bus) -> None:
    await bus.publish(deleted_event("first"))
    handled: list[str] = []
    first, done = asyncio.Event(), asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        handled.append(event.name)
        (done if event.name == "second" else first).set()

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        raise AssertionError(f"exhausted: {exc!r}")

    async def delete_then_publish() -> None:
        await first.wait()
        await bus.js.delete_consumer(subjects.STREAM, subjects.durable_name("rebound"))
        await bus.publish(deleted_event("second"))

    spec = ConsumerSpec(service="rebound", filters=(DELETED,), pull_expires_s=0.5)
    meddler = asyncio.create_task(delete_then_publish())
    with structlog.testing.capture_logs() as logs:
        await consume_until(bus, spec, handler, exhausted, done)
    await meddler
    rebinds = [
        (line["durable"], line["error"]) for line in logs if line["event"] == "consumer.rebind"
    ]
    assert rebinds[:1] == [("plnt-rebound", "ConnectionError('the consumer was deleted')")]
    assert handled[0] == "first" and handled[-1] == "second"  # the new durable delivers all


async def test_a_stop_returns_cleanly_when_the_in_flight_ack_cannot_be_sent(bus: Bus) -> None:
    await bus.publish(deleted_event("stranded"))
    started = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        started.set()
        await asyncio.sleep(3.0)  # ends while run() waits for it, on a closed connection

    async def exhausted(event: Envelope, exc: BaseException) -> None:
        raise AssertionError(f"exhausted: {exc!r}")

    stop = asyncio.Event()
    spec = ConsumerSpec(service="stranded", filters=(DELETED,), pull_expires_s=0.5)
    running = asyncio.create_task(EventConsumer(bus, spec, handler, exhausted).run(stop))
    await asyncio.wait_for(started.wait(), timeout=10)
    stop.set()
    await bus.nc.close()
    await asyncio.wait_for(running, timeout=10)  # the failed ack does not escape the stop
