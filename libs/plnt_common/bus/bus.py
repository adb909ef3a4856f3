"""``Bus``: one NATS connection with the JetStream handles a service needs, and publishing.

Every publish sets ``Nats-Msg-Id`` so a redelivered handler that publishes again is
deduplicated by the server, and retries through outages with the same id. While tracing
is on it also carries ``traceparent``, naming its ``publish <type>`` span (``saga_tracing``).

A store out of room (a limit reached with discard-new, or the server's disk full) answers
503 like a leaderless stream: ``full_store`` tells them apart, a publish keeps retrying
it (room frees as old events age out or an operator acts) and raises ``BusFull`` naming
the store and the setting when its deadline passes, never a bare ``ServiceUnavailable``.
"""

import asyncio
import hashlib
from dataclasses import dataclass

from nats.aio.client import Client
from nats.errors import ConnectionClosedError, NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.errors import (
    APIError,
    KeyDeletedError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NoStreamResponseError,
    ServiceUnavailableError,
)
from nats.js.kv import KeyValue
from nats.js.object_store import ObjectStore

from plnt_common import subjects, tracing
from plnt_common.bus import saga_tracing
from plnt_common.bus.connection import connect
from plnt_common.bus.kv_watch import Reconnects
from plnt_common.bus.provision import ensure_jetstream
from plnt_common.errors import BusFull, BusUnavailable
from plnt_common.events import Envelope
from plnt_common.logs import get_logger
from plnt_common.metrics import SIDE_EFFECTS
from plnt_common.saga import TerminalClaim
from plnt_common.settings import bus_settings, replicas_setting

log = get_logger(__name__)

PUBLISH_RETRY_DELAYS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)
"""Back-off between publish attempts; the last delay repeats until the deadline."""
PUBLISH_ATTEMPT_S = 2.0
"""How long one publish attempt waits for the server's acknowledgement."""


OUT_OF_ROOM_ERRORS = {10047, 10028, 10023}
"""JetStream's 'insufficient storage / memory resources available' and 'insufficient
resources': the servers' disks (or their JetStream limits) are full."""
STORE_FAILED = 10077
"""JetStream's 'store failed', which says why: out of room when a limit is reached
('maximum bytes exceeded', 'maximum messages exceeded') or the disk is full."""
OUT_OF_ROOM_WORDS = ("maximum bytes", "maximum messages", "no space", "resources")


def full_store(exc: BaseException, store: str, setting: str) -> BusFull | None:
    """``BusFull`` naming ``store`` and the ``setting`` that sizes it when ``exc`` is a
    refusal for want of room, else None."""
    if not isinstance(exc, APIError):
        return None
    said = (exc.description or "").lower()
    out_of_room = exc.err_code in OUT_OF_ROOM_ERRORS or (
        exc.err_code == STORE_FAILED and any(word in said for word in OUT_OF_ROOM_WORDS)
    )
    if not out_of_room:
        return None
    return BusFull(
        f"{store} is full ({exc.description}): free room on the NATS servers' disks or "
        f"raise {setting}; the write is retried until it fits"
    )


def message_id(envelope: Envelope, step: str = "") -> str:
    """``<sagaid>.<type>[.<step>]``: one id per saga step, so a republish is a duplicate."""
    base = f"{envelope.sagaid}.{envelope.event_type.value}"
    return f"{base}.{step}" if step else base


def content_step(*parts: str) -> str:
    """A ``step`` for events a saga may publish more than once with news (a wait's
    reason): the same content is a duplicate, a change is published."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


@dataclass
class Bus:
    """Connection, JetStream context and the buckets of the contract."""

    nc: Client
    js: JetStreamContext
    runs: KeyValue
    routes: KeyValue
    resources: KeyValue
    releases: KeyValue
    sagas: KeyValue
    specs: ObjectStore
    service: str
    reconnects: Reconnects
    events_direct: bool = False
    """Whether the events stream answers direct gets (see ``provision.direct_reads``)."""

    @classmethod
    async def open(cls, url: str, *, service: str, wait_for_server: bool = False) -> "Bus":
        """Connect, provision idempotently and bind the buckets."""
        reconnects = Reconnects()
        nc = await connect(
            url,
            name=f"plnt-{service}",
            retry_on_start=wait_for_server,
            on_reconnected=reconnects.mark,
        )
        js = nc.jetstream()  # the client's API timeout: 5 s
        await ensure_jetstream(js, replicas=replicas_setting(), limits=bus_settings())
        events = await js.stream_info(subjects.STREAM)
        return cls(
            nc=nc,
            js=js,
            runs=await js.key_value(subjects.RUNS_BUCKET),
            routes=await js.key_value(subjects.ROUTES_BUCKET),
            resources=await js.key_value(subjects.RESOURCES_BUCKET),
            releases=await js.key_value(subjects.RELEASES_BUCKET),
            sagas=await js.key_value(subjects.SAGAS_BUCKET),
            specs=await js.object_store(subjects.SPECS_OBJECT_STORE),
            service=service,
            reconnects=reconnects,
            events_direct=bool(events.config.allow_direct),
        )

    async def close(self) -> None:
        if self.nc.is_closed:
            return
        if self.nc.is_connected:
            await self.nc.drain()
        else:  # reconnecting: nothing can be drained, and drain() would refuse
            await self.nc.close()

    async def publish(
        self,
        envelope: Envelope,
        *,
        step: str = "",
        deadline_s: float = 60.0,  # pragma: no mutate (a timing choice: no test waits a minute)
    ) -> bool:
        """Publish with ``Nats-Msg-Id``; retry transient failures until ``deadline_s``.

        Returns False when the server reports a duplicate (already published), unless an
        earlier attempt of this call timed out: the server may have stored that attempt and
        lost its answer (a leader killed mid-publish), so the duplicate is taken for this
        call's own. Raises ``BusUnavailable`` when the deadline passes without an
        acknowledgement.
        """
        subject = subjects.event_subject(envelope.event_type, envelope.namespace, envelope.name)
        headers = {"Nats-Msg-Id": message_id(envelope, step)}
        if tracing.ENABLED:  # off: no span, no traceparent header
            with saga_tracing.publishing(envelope, subject=subject, headers=headers):
                return await self._publish(subject, envelope, headers, deadline_s)
        return await self._publish(subject, envelope, headers, deadline_s)

    async def _publish(
        self, subject: str, envelope: Envelope, headers: dict[str, str], deadline_s: float
    ) -> bool:
        payload = envelope.model_dump_json().encode()
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + deadline_s
        attempt = 0
        unanswered = False  # an attempt timed out: the server may have stored it
        full: BusFull | None = None  # the stream refused for want of room
        while True:
            try:
                # an attempt never waits past the deadline
                wait = min(PUBLISH_ATTEMPT_S, give_up_at - loop.time())
                ack = await self.js.publish(subject, payload, headers=headers, timeout=wait)
                if ack.duplicate:  # a redelivered step published again: the stream kept one
                    log.info("bus.duplicate_dropped", msg_id=headers["Nats-Msg-Id"], own=unanswered)
                return unanswered or not ack.duplicate
            except (
                NatsTimeout,
                NoRespondersError,
                NoStreamResponseError,  # no stream leader yet: a cluster electing one
                ServiceUnavailableError,
                ConnectionClosedError,
                APIError,  # only a store out of room (500 on a full disk): others raise below
            ) as exc:
                refused = full_store(exc, subjects.STREAM, "PLNT_EVENTS_MAX_BYTES")
                transient = not isinstance(exc, APIError) or isinstance(
                    exc, ServiceUnavailableError
                )
                if not transient and refused is None:
                    raise
                unanswered = unanswered or isinstance(exc, NatsTimeout)
                # an attempt cut short by the deadline after refusals still was refused
                full = refused or full
                if loop.time() >= give_up_at:  # pragma: no mutate (`>`: only at that instant)
                    if full is not None:
                        raise full from None
                    raise BusUnavailable(
                        f"publishing {subject} failed for {deadline_s}s: {exc!r}"
                    ) from None
                delay = PUBLISH_RETRY_DELAYS_S[min(attempt, len(PUBLISH_RETRY_DELAYS_S) - 1)]
                attempt += 1
                log.warning(
                    "bus.publish_retry",
                    subject=subject,
                    attempt=attempt,
                    delay_s=delay,
                    error=str(full) if full is not None else repr(exc),
                )
                await asyncio.sleep(delay)

    async def publish_terminal(self, envelope: Envelope) -> bool:
        """Publish a saga's terminal event unless another terminal already ended the saga.

        The claim is a create-only key per saga id in ``plnt-sagas`` holding the event:
        the first terminal wins; a redelivered step claiming the same type publishes the
        claimed event unless its publication is recorded. Returns True when an event of
        this type is (or already was) the saga's terminal.
        """
        claim = TerminalClaim.of(envelope)
        if await self._create_in_sagas(envelope.sagaid, claim.encode()):
            SIDE_EFFECTS.labels(self.service, "terminal_claim").inc()
        else:
            existing = await self.terminal_claim(envelope.sagaid)
            if existing is None:  # purged meanwhile (tests); the saga is no longer tracked
                return False
            if existing.event_type != claim.event_type:
                log.info(
                    "saga.terminal_already_claimed",
                    sagaid=envelope.sagaid,
                    refused=envelope.event_type.value,  # not ``event``: structlog's message
                    claimed_by=existing.event_type,
                )
                return False
            await self.publish_claimed(existing.event or envelope)
            return True
        await self.publish_claimed(envelope, fresh=True)
        return True

    async def publish_claimed(self, envelope: Envelope, *, fresh: bool = False) -> None:
        """Publish a saga's claimed terminal unless its publication is recorded
        (``published.<sagaid>``), then record it: past the duplicate window the stream
        would store a republished terminal again. ``fresh``: claimed just now."""
        key = f"published.{envelope.sagaid}"
        if not fresh and await self._claim(key) is not None:
            return
        await self.publish(envelope)
        await self._create_in_sagas(key, b"")  # False: recorded by another replica

    async def _create_in_sagas(self, key: str, value: bytes) -> bool:
        """Create ``key`` in ``plnt-sagas``: False when it exists; ``BusFull`` when the
        bucket has no room."""
        try:
            await self.sagas.create(key, value)
            return True
        except KeyWrongLastSequenceError:
            return False
        except APIError as exc:
            full = full_store(exc, subjects.SAGAS_BUCKET, "PLNT_BUCKETS_MAX_BYTES")
            if full is not None:
                raise full from None
            raise

    async def terminal_claim(self, sagaid: str) -> TerminalClaim | None:
        """The terminal event that ended ``sagaid``; None while it has not ended."""
        raw = await self._claim(sagaid)
        return None if raw is None else TerminalClaim.decode(raw)

    async def saga_ended(self, sagaid: str) -> bool:
        """True once some terminal event claimed ``sagaid`` (the claim is not decoded)."""
        return await self._claim(sagaid) is not None

    async def _claim(self, sagaid: str) -> bytes | None:
        try:
            entry = await self.sagas.get(sagaid)
        except (KeyNotFoundError, KeyDeletedError):
            return None
        return entry.value or b""
