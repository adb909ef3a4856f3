"""A saga service as a FastStream application on a ``NatsBroker``.

FastStream declares the service's subscriber (its durable, its filter subjects, the
``Envelope`` schema) and publishers, and runs every message through its parser, decoder
and middlewares to the handler. Fetching and the delivery policy stay ``EventConsumer``'s:
FastStream's own pull loop waits for a whole batch before it fetches again, does not
re-bind after a server restart, and its ack policies cannot NAK with back-off or hand
the last delivery to ``on_exhausted`` (docs/design.md, "Delivery").

The event is decoded once: ``EventConsumer`` decodes and validates it (a poison message
never reaches FastStream), and the subscriber's parser and decoder hand that ``Envelope``
over; the service's broker calls the handler without FastDepends (``apply_types=False``),
which would only validate the same ``Envelope`` again.

Publishers are declared for the AsyncAPI document only: events are published through
``Bus``, which sets ``Nats-Msg-Id`` and retries a publish the server did not confirm.
"""

import asyncio
import functools
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

from faststream import FastStream
from faststream.message import StreamMessage
from faststream.middlewares import AckPolicy
from faststream.nats import JStream, NatsBroker, PullSub
from faststream.nats.message import NatsMessage
from faststream.nats.subscriber.usecases.stream_pull_subscriber import PullStreamSubscriber
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import api
from pydantic import BaseModel, Field, create_model

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec, Delivery, EventConsumer, Handler, OnExhausted
from plnt_common.events import EVENT_DATA, TYPE_PREFIX, Envelope, EventType

_HANDOVER: ContextVar["Handover | None"] = ContextVar("plnt_handover", default=None)
"""The ``Handover`` of the message being dispatched. A context variable of its own, not a
FastStream context key: each message runs in its own task, and a lookup through
FastStream's context costs several times more."""

_STREAM = JStream(subjects.STREAM, declare=False)  # provisioned by ``plnt_common.bus.provision``


class BusBroker(NatsBroker):
    """A ``NatsBroker`` on the service's ``Bus`` connection: one connection per process,
    with the bus's reconnect settings; the bus closes it."""

    def __init__(self, bus: Bus, **options: Any) -> None:
        super().__init__(**options)
        self._bus = bus

    async def _connect(self) -> Client:
        self.config.connect(self._bus.nc)
        return self._bus.nc

    async def stop(
        self,
        exc_type: type[BaseException] | None = None,
        exc_val: BaseException | None = None,
        exc_tb: TracebackType | None = None,
    ) -> None:
        self._connection = None  # not drained here: ``Bus.close`` does
        await super().stop(exc_type, exc_val, exc_tb)


class FeedSubscriber(PullStreamSubscriber):
    """FastStream's JetStream pull subscriber with ``EventConsumer`` as its pull loop.

    Each message goes through ``process_message`` (parser, decoder, middlewares, the
    handler); its outcome goes back to ``EventConsumer``, which acks, NAKs or terminates.
    """

    _feed: "_Feed | None"

    def feed_from(self, bus: Bus, spec: ConsumerSpec, on_exhausted: OnExhausted) -> None:
        self._feed = _Feed(consumer=EventConsumer(bus, spec, self._dispatch, on_exhausted))

    def feeding(self) -> "asyncio.Task[None]":
        """The running pull loop."""
        if self._feed is None or self._feed.task is None:
            raise RuntimeError("the subscriber is not started with a feed")
        return self._feed.task

    async def _create_subscription(self) -> None:
        feed = self._feed
        if feed is None or feed.task is not None:
            return
        feed.task = asyncio.create_task(feed.consumer.run(feed.stop))

    async def stop(self) -> None:
        feed = self._feed
        if feed is not None and feed.task is not None:
            feed.stop.set()  # in-flight handlers finish and ack before this returns
            task, feed.task = feed.task, None
            await task
            feed.stop = asyncio.Event()
        await super().stop()

    def local(self, key: str) -> Any:
        """A value of the message being handled from FastStream's context, or None."""
        return self._outer_config.context.get_local(key)

    async def _dispatch(self, envelope: Envelope, delivery: Delivery) -> None:
        token = _HANDOVER.set(Handover(envelope, delivery))
        try:
            await self.process_message(delivery.msg)
        finally:
            _HANDOVER.reset(token)


@dataclass(frozen=True)
class Handover:
    """What ``EventConsumer`` decoded and knows of the message FastStream dispatches."""

    envelope: Envelope
    delivery: Delivery


async def parse_handed_over(
    msg: Msg, parse_js: Callable[[Msg], Awaitable[StreamMessage[Msg]]]
) -> StreamMessage[Msg]:
    """FastStream's JetStream parser, with the envelope's id as the message's: its own
    parser makes a uuid4 for every message without FastStream's headers."""
    handover = _HANDOVER.get()
    if handover is None:  # not fed by EventConsumer (FastStream's in-memory broker)
        return await parse_js(msg)
    headers = msg.headers or {}
    return NatsMessage(
        raw_message=msg,
        body=msg.data,
        headers=headers,
        content_type=headers.get("content-type"),
        message_id=handover.envelope.id,
        correlation_id=handover.envelope.id,
    )


async def decode_handed_over(message: StreamMessage[Msg]) -> Envelope:
    """The ``Envelope`` ``EventConsumer`` decoded and validated already."""
    handover = _HANDOVER.get()
    if handover is None:  # FastStream's in-memory broker: the model, as its decoder made it
        return Envelope.model_validate_json(message.body)
    return handover.envelope


@dataclass
class _Feed:
    consumer: EventConsumer
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: "asyncio.Task[None] | None" = None


class SagaHandlers(Protocol):
    """A service's step: ``handle`` each event, ``on_exhausted`` after the last delivery."""

    async def handle(self, event: Envelope, delivery: Delivery, /) -> None: ...

    async def on_exhausted(self, event: Envelope, exc: BaseException, /) -> None: ...


@functools.cache
def event_schema(event_type: EventType) -> type[BaseModel]:
    """The document's schema of one event type: the ``Envelope`` with its typed ``data``."""
    data_model = EVENT_DATA[event_type]
    title = "".join(part.capitalize() for part in event_type.value.replace("_", ".").split("."))
    return create_model(
        f"{title}Event",
        __base__=Envelope,
        __doc__=f"A {event_type.value} event: {(data_model.__doc__ or '').strip()}".strip(": "),
        type=(str, Field(examples=[f"{TYPE_PREFIX}{event_type.value}"])),
        data=(data_model, ...),
    )


@dataclass(frozen=True)
class ServiceApp:
    """A service's FastStream app, started and stopped with the service."""

    app: FastStream
    subscriber: FeedSubscriber

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop``; in-flight handlers finish and ack before return.

        Raises what ended the subscriber's pull loop, should it end before ``stop``.
        """
        await self.app.start()
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait((stopping, self.subscriber.feeding()), return_when="FIRST_COMPLETED")
        finally:
            stopping.cancel()
            await self.app.stop()


def declare_service(
    broker: NatsBroker,
    spec: ConsumerSpec,
    *,
    emits: tuple[EventType, ...],
    handler: Handler,
) -> FeedSubscriber:
    """Declare the service's durable pull subscriber and its publishers on ``broker``."""
    durable = subjects.durable_name(spec.service)
    subscriber = broker.subscriber(
        stream=_STREAM,
        durable=durable,
        config=api.ConsumerConfig(durable_name=durable, filter_subjects=list(spec.filters)),
        pull_sub=PullSub(batch_size=spec.concurrency),
        parser=parse_handed_over,
        decoder=decode_handed_over,
        ack_policy=AckPolicy.MANUAL,  # EventConsumer acks, NAKs and terminates
        no_reply=True,  # a JetStream message's reply subject is its ack subject
        title=f"{durable}:consume",
        description=f"The {spec.service}'s durable pull consumer, shared by its replicas.",
    )
    # FastStream's factory has no hook for a subscriber class: the pull subscriber it
    # built gets plnt's pull loop, the rest of it unchanged.
    subscriber.__class__ = FeedSubscriber
    feed_subscriber: FeedSubscriber = subscriber  # type: ignore[assignment]
    feed_subscriber._feed = None

    # The delivery is read from the context here, not injected as a parameter: FastDepends
    # resolves an injected context field in a worker thread, about a millisecond a message.
    async def on_event(envelope: Envelope) -> None:
        handover = _HANDOVER.get()
        if handover is not None:
            await handler(envelope, handover.delivery)
            return
        message: NatsMessage = feed_subscriber.local("message")  # the in-memory broker
        await handler(envelope, Delivery(msg=message.raw_message, attempt=1))

    on_event.__name__ = f"{spec.service}_handle"
    on_event.__doc__ = f"The {spec.service}'s step for each event it consumes."
    feed_subscriber(on_event)
    for event_type in emits:
        broker.publisher(
            subjects.event_filter(event_type),
            stream=_STREAM,
            schema=event_schema(event_type),
            title=f"{spec.service}:{event_type.value}",
            description=f"The {spec.service} publishes {event_type.value} (through Bus).",
        )
    return feed_subscriber


def service_app(
    bus: Bus,
    spec: ConsumerSpec,
    *,
    emits: tuple[EventType, ...],
    handlers: SagaHandlers,
) -> ServiceApp:
    """The service's FastStream app on ``bus``'s connection."""
    # structlog logs every step already; the decoder hands over a validated Envelope
    broker = BusBroker(bus, logger=None, apply_types=False)
    subscriber = declare_service(broker, spec, emits=emits, handler=handlers.handle)
    subscriber.feed_from(bus, spec, handlers.on_exhausted)
    return ServiceApp(app=FastStream(broker, logger=None), subscriber=subscriber)
