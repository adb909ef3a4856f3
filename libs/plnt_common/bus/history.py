"""Reading the stream back: for ``plnt history``, ``plnt replay`` and a late subscriber.

An ephemeral pull consumer with no acks reads from the first message in stream order;
it stops at the last sequence that existed when reading began.
"""

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext, api
from nats.js.errors import APIError, FetchTimeoutError, NotFoundError

from plnt_common import subjects
from plnt_common.errors import SpecInvalid
from plnt_common.events import Envelope, decode_event

BATCH = 1000


@dataclass(frozen=True)
class StoredEvent:
    """One message of the stream; ``event`` is None for a message that does not decode."""

    sequence: int
    subject: str
    event: Envelope | None
    problem: str = ""


async def read_events(
    js: JetStreamContext, *, filter_subject: str = f"{subjects.SUBJECT_PREFIX}.>"
) -> AsyncIterator[StoredEvent]:
    """Every stored event matching ``filter_subject``, oldest first."""
    info = await js.stream_info(subjects.STREAM)
    last = info.state.last_seq
    if info.state.messages == 0:
        return
    config = api.ConsumerConfig(
        ack_policy=api.AckPolicy.NONE,
        deliver_policy=api.DeliverPolicy.ALL,
        filter_subject=filter_subject,
        inactive_threshold=30.0,
        mem_storage=True,
    )
    sub = await js.pull_subscribe(filter_subject, stream=subjects.STREAM, config=config)
    try:
        while True:
            try:
                msgs = await sub.fetch(batch=BATCH, timeout=0.5)
            except (NatsTimeout, FetchTimeoutError, TimeoutError):
                return  # nothing more matches
            for msg in msgs:
                sequence = msg.metadata.sequence.stream
                try:
                    yield StoredEvent(sequence, msg.subject, decode_event(msg.data))
                except SpecInvalid as exc:
                    yield StoredEvent(sequence, msg.subject, None, str(exc))
                if sequence >= last or msg.metadata.num_pending == 0:
                    return
    finally:
        await sub.unsubscribe()


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
