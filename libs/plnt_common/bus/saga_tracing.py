"""The saga's spans on the bus, after OpenTelemetry's messaging conventions.

``publishing`` wraps a publish in a ``publish <type>`` span (kind PRODUCER) and writes its
``traceparent`` into the message's NATS headers; ``processing`` wraps a handler run in a
``process <type>`` span (kind CONSUMER), child of the span those headers name. A publish
with no current span (the watcher's ``run.requested``) starts a trace: the saga's trace,
which every later step joins because each handler publishes inside its own span. The
watcher's own publishes outside a handler (a deadline, an operator's request) join it
through ``continuing``.

A handler that raises has the exception recorded on its span; one that handles a failure
itself and publishes the step's failure event (``run.failed`` for a spec whose hash does
not match, ``install.failed``, ...) has that failure recorded on its span too.

Callers test ``tracing.ENABLED`` first: with tracing off nothing here runs, so no span is
built and no header added.
"""

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from nats.aio.msg import Msg
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from plnt_common import subjects, tracing
from plnt_common.events import Envelope, EventType

SCOPE = "plnt.saga"
"""The instrumentation scope of the saga's spans."""
MESSAGE_ID_HEADER = "Nats-Msg-Id"
FAILURE_EVENTS = frozenset(
    {
        EventType.RUN_FAILED,
        EventType.INSTALL_FAILED,
        EventType.SMOKE_FAILED,
        EventType.ANALYSIS_FAILED,
        EventType.SHADOW_FAILED,
    }
)
"""Events saying the step that publishes them failed: its span carries the error."""

_tracer = tracing.tracer(SCOPE)  # a proxy until ``tracing.setup`` installs the provider


def _attributes(
    envelope: Envelope, *, subject: str, message_id: str, operation: str
) -> dict[str, Any]:
    return {
        "messaging.system": "nats",
        "messaging.operation.type": operation,
        "messaging.destination.name": subject,
        "messaging.message.id": message_id,
        "plnt.saga_id": envelope.sagaid,
        "plnt.event_type": envelope.event_type.value,
    }


@contextmanager
def publishing(envelope: Envelope, *, subject: str, headers: dict[str, str]) -> Iterator[Span]:
    """The ``publish <type>`` span around one publish; puts its ``traceparent`` in
    ``headers``. A failure event marks the span of the step that publishes it."""
    failure = envelope.event_type in FAILURE_EVENTS
    step = trace.get_current_span()  # the handler's span, before this one replaces it
    attributes = _attributes(
        envelope, subject=subject, message_id=headers[MESSAGE_ID_HEADER], operation="send"
    )
    with _tracer.start_as_current_span(
        f"publish {envelope.event_type.value}", kind=SpanKind.PRODUCER, attributes=attributes
    ) as span:
        tracing.inject(headers)
        if failure:  # a publish outside any handler marks its own span
            record_failure(step if step.is_recording() else span, envelope)
        yield span


@contextmanager
def processing(msg: Msg, envelope: Envelope, *, service: str) -> Iterator[Span]:
    """The ``process <type>`` span around one handler run, child of the publishing span
    the message's ``traceparent`` names (a new trace when it names none). An exception
    leaving the handler is recorded on it and sets its status to error."""
    headers: Mapping[str, str] = msg.headers or {}
    attributes = _attributes(
        envelope,
        subject=msg.subject,
        message_id=headers.get(MESSAGE_ID_HEADER, ""),
        operation="process",
    )
    attributes["messaging.consumer.group.name"] = subjects.durable_name(service)
    with _tracer.start_as_current_span(
        f"process {envelope.event_type.value}",
        context=tracing.extract(headers),
        kind=SpanKind.CONSUMER,
        attributes=attributes,
    ) as span:
        yield span


@contextmanager
def continuing(saga_traceparent: str) -> Iterator[None]:
    """Publishes inside join the saga trace that ``saga_traceparent`` (the projection's: the
    span that published the saga's opening event) names, when no span is current: for the
    events the watcher publishes outside any handler, a step's deadline and an operator's
    request. Nothing while tracing is off or the saga has no trace."""
    if not tracing.ENABLED or not saga_traceparent or trace.get_current_span().is_recording():
        yield
        return
    token = tracing.activate_remote(saga_traceparent)
    try:
        yield
    finally:
        tracing.deactivate(token)


def record_failure(span: Span, envelope: Envelope) -> None:
    """Mark ``span`` failed with what the failure event ``envelope`` says: an ``exception``
    event (the reason as its type, the message) and an error status."""
    kind, message = failure_of(envelope.data)
    span.add_event("exception", {"exception.type": kind, "exception.message": message})
    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, f"{kind}: {message}" if message else kind))


def failure_of(data: Mapping[str, Any]) -> tuple[str, str]:
    """(reason, message) of a failure event's data: ``run.failed`` and ``install.failed``
    carry both; the verdicts carry figures with a reason (and smoke a failure kind)."""
    figures = data.get("figures") or {}
    kind = data.get("reason") or figures.get("failure") or "StepFailed"
    message = data.get("message") or figures.get("reason") or ""
    return str(kind), str(message)
