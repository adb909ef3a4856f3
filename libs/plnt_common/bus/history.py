"""Reading the stream back: for ``plnt history``, ``plnt replay`` and a late subscriber.

An ephemeral pull consumer with no acks reads, in stream order, the messages pending when
it was created (``read_batches``): ``read_events`` decodes each event, ``read_messages``
(replay's) hands over the subjects and raw payloads.
"""

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TypeVar

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext, api
from nats.js.errors import APIError, NotFoundError

from plnt_common import subjects, tracing
from plnt_common.errors import BusUnavailable, SpecInvalid
from plnt_common.events import Envelope, decode_event

BATCH = 1000
T = TypeVar("T")
BATCH_TIMEOUT_S = 10.0
"""How long one batch of ``read_payloads`` may take before the server counts as gone."""
END_OF_PULL = frozenset({"404", "408"})
"""Status codes ending a pull request: no more messages now, or the request expired."""
UNANSWERED_RETRIES = 40
UNANSWERED_WAIT_S = 0.05
"""A pull answered "no responders" is asked again this often, this far apart (2 s)."""


@dataclass(frozen=True)
class StoredEvent:
    """One message of the stream; ``event`` is None for a message that does not decode."""

    sequence: int
    subject: str
    event: Envelope | None
    problem: str = ""


async def read_events(
    nc: Client, *, filter_subject: str = f"{subjects.SUBJECT_PREFIX}.>"
) -> AsyncIterator[StoredEvent]:
    """Every stored event matching ``filter_subject``, oldest first (see ``read_batches``)."""
    async for batch in read_batches(
        nc, stream=subjects.STREAM, config=reader_config(filter_subject), keep=_stored_event
    ):
        for stored in batch:
            yield stored


def _stored_event(msg: Msg) -> StoredEvent:
    sequence = msg.metadata.sequence.stream
    try:
        return StoredEvent(sequence, msg.subject, decode_event(msg.data))
    except SpecInvalid as exc:
        return StoredEvent(sequence, msg.subject, None, str(exc))


def reader_config(filter_subject: str) -> api.ConsumerConfig:
    """An ephemeral reader of the stored messages matching ``filter_subject``, for
    ``read_batches``: no acks, from the first message, gone 30 s after its last pull."""
    return api.ConsumerConfig(
        ack_policy=api.AckPolicy.NONE,
        deliver_policy=api.DeliverPolicy.ALL,
        filter_subject=filter_subject,
        inactive_threshold=30.0,
        mem_storage=True,
    )


async def read_messages(
    nc: Client, *, filter_subject: str = f"{subjects.SUBJECT_PREFIX}.>", batch: int = BATCH
) -> AsyncIterator[list[tuple[str, bytes, str]]]:
    """(subject, payload, traceparent header or "") of the stored messages matching
    ``filter_subject``, oldest first: ``plnt replay``'s reader, a batch at a time (see
    ``read_batches``)."""
    async for messages in read_batches(
        nc,
        stream=subjects.STREAM,
        config=reader_config(filter_subject),
        keep=_subject_and_payload,
        batch=batch,
    ):
        yield messages


def _subject_and_payload(msg: Msg) -> tuple[str, bytes, str]:
    headers = msg.headers
    return msg.subject, msg.data, headers.get(tracing.TRACEPARENT, "") if headers else ""


async def read_batches(
    nc: Client,
    *,
    stream: str,
    config: api.ConsumerConfig,
    keep: Callable[[Msg], T],
    batch: int = BATCH,
) -> AsyncIterator[list[T]]:
    """``keep(msg)`` of every message an ephemeral consumer with ``config`` has pending.

    ``no_wait`` pull requests answered into a callback cost a fraction of ``fetch`` per
    message, and no message's metadata is parsed. Reads the messages the consumer had
    pending when it was created (a count the server takes at once, unlike a KV watch's
    end of initial values). Raises ``BusUnavailable`` when a batch does not arrive within
    ``BATCH_TIMEOUT_S`` or the server ends a pull with an error status.
    """
    js = nc.jetstream()
    consumer = await js.add_consumer(stream, config)
    remaining = consumer.num_pending or 0
    loop = asyncio.get_running_loop()
    received: list[T] = []
    wanted = 0
    done: asyncio.Future[str] = loop.create_future()

    async def collect(msg: Msg) -> None:
        headers = msg.headers
        if headers and not msg.data and api.Header.STATUS.value in headers:
            if not done.done():
                status = headers[api.Header.STATUS.value]
                done.set_result(f"{status} {headers.get(api.Header.DESCRIPTION.value, '')}")
            return
        received.append(keep(msg))  # only what is kept: the message object is freed at once
        if len(received) == wanted and not done.done():
            done.set_result("")

    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=collect)
    next_subject = f"{api.DEFAULT_PREFIX}.CONSUMER.MSG.NEXT.{stream}.{consumer.name}"
    unanswered = 0
    try:
        while remaining > 0:
            wanted = min(batch, remaining)
            request = json.dumps({"batch": wanted, "no_wait": True}).encode()
            await nc.publish(next_subject, request, reply=inbox)
            try:
                status = await asyncio.wait_for(done, timeout=BATCH_TIMEOUT_S)
            except TimeoutError:
                raise BusUnavailable(f"reading {stream}: no answer in {BATCH_TIMEOUT_S}s") from None
            if status.startswith("503") and unanswered < UNANSWERED_RETRIES:
                # a cluster may route the first pulls before the new consumer is served
                unanswered += 1
                done = loop.create_future()
                await asyncio.sleep(UNANSWERED_WAIT_S)
                continue
            if status and status.split(" ", 1)[0] not in END_OF_PULL:
                raise BusUnavailable(f"reading {stream}: the server answered {status.strip()}")
            kept, received = received, []
            done = loop.create_future()
            remaining -= len(kept)
            if kept:
                yield kept
            if status:
                return  # fewer than pending: messages were removed meanwhile
    finally:
        await sub.unsubscribe()
        with contextlib.suppress(APIError, NatsTimeout):
            await js.delete_consumer(stream, consumer.name)


@dataclass(frozen=True)
class DeadLetter:
    """A stored event some consumer gave up on (exhausted retries, or undecodable)."""

    sequence: int
    subject: str
    consumer: str
    deliveries: int
    time: str
    event: Envelope | None


async def read_dead_letters(js: JetStreamContext, *, namespace: str, name: str) -> list[DeadLetter]:
    """The dead letters of one run, from the server's 'terminated' advisories."""
    try:
        info = await js.stream_info(subjects.DEAD_LETTER_STREAM)
    except NotFoundError:
        return []
    if info.state.messages == 0:
        return []
    found = []
    suffix = f".{namespace}.{name}"
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        try:
            advisory = json.loads(
                (await js.get_msg(subjects.DEAD_LETTER_STREAM, seq)).data or b"{}"
            )
            original = await js.get_msg(subjects.STREAM, int(advisory["stream_seq"]))
        except (APIError, KeyError, ValueError):
            continue  # the advisory or the event itself aged out (or was never stored)
        if not (original.subject or "").endswith(suffix):
            continue
        try:
            event: Envelope | None = decode_event(original.data or b"")
        except SpecInvalid:
            event = None
        found.append(
            DeadLetter(
                sequence=int(advisory["stream_seq"]),
                subject=original.subject or "",
                consumer=str(advisory.get("consumer", "")),
                deliveries=int(advisory.get("deliveries", 0)),
                time=str(advisory.get("timestamp", "")),
                event=event,
            )
        )
    return found
