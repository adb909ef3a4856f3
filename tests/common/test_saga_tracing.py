"""Saga spans on the bus against a real nats-server: the ``traceparent`` header, the
``publish``/``process`` spans and their links, failures on spans, and nothing at all while
tracing is off. The spans go to an in-memory exporter of a tracer given to
``saga_tracing`` (the process's global tracer provider is left alone); the exported trace
of real service processes is tests/e2e/test_e2e_saga_trace.py's."""

import asyncio
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from plnt_common import subjects, tracing
from plnt_common.bus import saga_tracing
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec, Delivery, EventConsumer
from plnt_common.events import (
    Envelope,
    EventType,
    RunDeleted,
    RunFailed,
    RunRemoved,
    follow_up,
    new_event,
    saga_id,
)
from plnt_common.status import Reason


@pytest.fixture
def exported(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """A real SDK tracer for the saga's spans, exporting to memory (tracing still off)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(saga_tracing, "_tracer", provider.get_tracer(saga_tracing.SCOPE))
    yield exporter
    provider.shutdown()


@pytest.fixture
def tracing_on(monkeypatch: pytest.MonkeyPatch, exported: InMemorySpanExporter) -> None:
    monkeypatch.setattr(tracing, "ENABLED", True)


def deleted(name: str) -> Envelope:
    return new_event(
        EventType.RUN_DELETED,
        RunDeleted(),
        namespace="default",
        name=name,
        sagaid=saga_id("default", name, 1),
        generation=1,
        source="test",
    )


async def stored_headers(bus: Bus, event_type: EventType, name: str) -> dict[str, str]:
    subject = subjects.event_subject(event_type, "default", name)
    msg = await bus.js.get_last_msg(subjects.STREAM, subject)
    return dict(msg.headers or {})


async def consume(bus: Bus, service: str, handler, on_exhausted=None, *, until: asyncio.Event):  # type: ignore[no-untyped-def]
    async def nothing(event: Envelope, exc: BaseException) -> None:
        pass

    spec = ConsumerSpec(
        service=service,
        filters=(subjects.event_filter(EventType.RUN_DELETED),),
        backoff_s=(0.05,),
    )
    stop = asyncio.Event()
    consumer = EventConsumer(bus, spec, handler, on_exhausted or nothing)
    task = asyncio.create_task(consumer.run(stop))
    try:
        await asyncio.wait_for(until.wait(), timeout=20)
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def ids(span: ReadableSpan) -> tuple[int, int]:
    context = span.get_span_context()
    assert context is not None
    return context.trace_id, context.span_id


async def test_with_tracing_off_a_saga_step_publishes_no_traceparent_and_builds_no_span(
    nats_url: str, exported: InMemorySpanExporter
) -> None:
    assert tracing.ENABLED is False  # no OTEL_EXPORTER_OTLP_ENDPOINT in the test process
    bus = await Bus.open(nats_url, service="test")
    handled = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        await bus.publish(follow_up(event, EventType.RUN_REMOVED, RunRemoved(), source="test"))
        handled.set()

    await bus.publish(deleted("quiet"))
    await consume(bus, "quiet", handler, until=handled)
    for event_type in (EventType.RUN_DELETED, EventType.RUN_REMOVED):
        headers = await stored_headers(bus, event_type, "quiet")
        assert headers == {"Nats-Msg-Id": f"default.quiet.1.1.{event_type.value}"}
    assert exported.get_finished_spans() == ()
    await bus.close()


async def test_a_consumer_span_is_the_child_of_the_publish_span_and_the_parent_of_the_next(
    nats_url: str, exported: InMemorySpanExporter, tracing_on: None
) -> None:
    bus = await Bus.open(nats_url, service="test")
    handled = asyncio.Event()
    seen_parent: list[str] = []

    async def handler(event: Envelope, delivery: Delivery) -> None:
        seen_parent.append(tracing.parent_traceparent())
        await bus.publish(follow_up(event, EventType.RUN_REMOVED, RunRemoved(), source="test"))
        handled.set()

    await bus.publish(deleted("traced"))  # no current span: the saga's trace starts here
    await consume(bus, "installer", handler, until=handled)
    spans = exported.get_finished_spans()
    [requested] = named(spans, "publish run.deleted")
    [processed] = named(spans, "process run.deleted")
    [answered] = named(spans, "publish run.removed")

    trace_id, requested_id = ids(requested)
    assert requested.parent is None and requested.kind is SpanKind.PRODUCER
    assert processed.kind is SpanKind.CONSUMER
    assert processed.parent is not None and processed.parent.span_id == requested_id
    assert ids(processed)[0] == trace_id
    assert answered.parent is not None and answered.parent.span_id == ids(processed)[1]
    assert ids(answered)[0] == trace_id
    # the handler reads the header its message came with (what the watcher keeps of a saga)
    assert seen_parent == [tracing.traceparent(requested)]  # type: ignore[arg-type]

    # each message names its publish span in its traceparent header
    for span, event_type in ((requested, EventType.RUN_DELETED), (answered, EventType.RUN_REMOVED)):
        headers = await stored_headers(bus, event_type, "traced")
        assert headers["traceparent"] == tracing.traceparent(span)  # type: ignore[arg-type]

    assert dict(processed.attributes or {}) == {
        "messaging.system": "nats",
        "messaging.operation.type": "process",
        "messaging.destination.name": "plnt.evt.run.deleted.default.traced",
        "messaging.message.id": "default.traced.1.1.run.deleted",
        "messaging.consumer.group.name": subjects.durable_name("installer"),
        "plnt.saga_id": "default.traced.1.1",
        "plnt.event_type": "run.deleted",
    }
    assert dict(answered.attributes or {}) == {
        "messaging.system": "nats",
        "messaging.operation.type": "send",
        "messaging.destination.name": "plnt.evt.run.removed.default.traced",
        "messaging.message.id": "default.traced.1.1.run.removed",
        "plnt.saga_id": "default.traced.1.1",
        "plnt.event_type": "run.removed",
    }
    await bus.close()


async def test_a_raising_handler_and_a_step_that_publishes_its_failure_have_their_spans_failed(
    nats_url: str, exported: InMemorySpanExporter, tracing_on: None
) -> None:
    bus = await Bus.open(nats_url, service="test")
    handled = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        if delivery.attempt == 1:
            raise RuntimeError("registry unreachable")
        failed = RunFailed(reason=Reason.INTEGRITY_MISMATCH, message="sha256 differs")
        await bus.publish(follow_up(event, EventType.RUN_FAILED, failed, source="test"))
        handled.set()

    await bus.publish(deleted("failing"))
    await consume(bus, "puller", handler, until=handled)
    raised, published_failure = named(exported.get_finished_spans(), "process run.deleted")

    assert raised.status.status_code is StatusCode.ERROR
    [exception] = raised.events
    assert exception.name == "exception"
    assert dict(exception.attributes or {})["exception.type"] == "RuntimeError"
    assert dict(exception.attributes or {})["exception.message"] == "registry unreachable"

    assert published_failure.status.status_code is StatusCode.ERROR
    assert published_failure.status.description == "IntegrityMismatch: sha256 differs"
    [failure] = published_failure.events
    assert dict(failure.attributes or {}) == {
        "exception.type": "IntegrityMismatch",
        "exception.message": "sha256 differs",
    }
    # the failure is the step's, not the publish's: that one went through
    [publish] = named(exported.get_finished_spans(), "publish run.failed")
    assert publish.status.status_code is StatusCode.UNSET
    await bus.close()


async def test_the_failure_event_of_an_exhausted_step_joins_the_saga_trace(
    nats_url: str, exported: InMemorySpanExporter, tracing_on: None
) -> None:
    bus = await Bus.open(nats_url, service="test")
    recorded = asyncio.Event()

    async def handler(event: Envelope, delivery: Delivery) -> None:
        raise RuntimeError("still failing")

    async def on_exhausted(event: Envelope, exc: BaseException) -> None:
        failed = RunFailed(reason=Reason.BACKEND_UNAVAILABLE, message=str(exc))
        await bus.publish(follow_up(event, EventType.RUN_FAILED, failed, source="test"))
        recorded.set()

    await bus.publish(deleted("exhausted"))
    await consume(bus, "exhausting", handler, on_exhausted, until=recorded)
    spans = exported.get_finished_spans()
    [requested] = named(spans, "publish run.deleted")
    [failed] = named(spans, "publish run.failed")
    assert ids(failed)[0] == ids(requested)[0]
    assert failed.parent is not None
    parent = next(span for span in spans if ids(span)[1] == failed.parent.span_id)
    assert parent.name == "process run.deleted" and parent.kind is SpanKind.CONSUMER
    await bus.close()
