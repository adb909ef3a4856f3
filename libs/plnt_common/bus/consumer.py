"""The one durable pull consumer a service's replicas share, and its delivery policy.

Delivery rules, made explicit rather than left to a framework default:
- ack only after the handler returned (its outcome event is published by then);
- an exception NAKs with back-off; after ``max_attempts`` the service's ``on_exhausted``
  publishes the step's failure event and the message is terminated, never dropped;
- a message that cannot be decoded is logged and terminated (no redelivery loop), except
  an event of a type this version does not know: a newer version published it, so it is
  NAKed with a delay for a newer replica of the shared durable, never terminated;
- from its arrival to its ack, ``in_progress`` keeps a message from being redelivered,
  also while it waits behind an earlier event of its run;
- at most ``concurrency`` messages are taken at a time (``PullFeed`` asks for no more);
- on stop, no more is asked for and in-flight handlers finish and ack before return.

The server's own ``max_deliver`` is unlimited so a crash during the last attempt cannot
lose a message: the next delivery sees the count and goes straight to ``on_exhausted``.

An ordered consumer (``ordered_by_run``) handles the events of one run in stream order,
however many replicas share its durable: the durable is a ``pinned_client`` priority
group (nats-server 2.11+), so the server delivers to one replica at a time (the others
stand by and take over ``priority_timeout`` after it stops pulling), and that replica
chains each run's events. A failed event is retried in place, its run's later events
waiting behind it with heartbeats: nothing is NAKed behind it, so every event's attempt
count is its own handler runs.

A handler waiting for a deadline (a step hold, a keep window) calls ``Delivery.defer``:
its message is NAKed with that delay instead of acked, nothing holds a slot meanwhile,
and the deferred deliveries are not counted as attempts.
"""

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog
from nats.aio.msg import Msg
from nats.js import api

from plnt_common import faults, health, subjects, tracing
from plnt_common.bus import durables, saga_tracing
from plnt_common.bus.bus import Bus
from plnt_common.bus.provision import ensure_durable
from plnt_common.bus.pull_feed import Pin, PullFeed
from plnt_common.errors import PlntError, SpecInvalid, UnknownEventType
from plnt_common.events import Envelope, decode_event
from plnt_common.logs import get_logger
from plnt_common.metrics import DEAD_LETTERS, SAGA_STEP_DURATION, SAGA_STEP_RUNS

log = get_logger(__name__)


@dataclass(frozen=True)
class ConsumerSpec:
    """How one service consumes: its durable name comes from ``service``."""

    service: str
    filters: tuple[str, ...]
    concurrency: int = 16
    ack_wait_s: float = 30.0
    max_attempts: int = 6
    backoff_s: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0)
    pull_expires_s: float = 1.0
    """How long a pull request stays open: also how long a stop or a lost server waits."""
    ordered_by_run: bool = False
    """Handle events of one run in stream order while other runs go concurrently, one
    replica at a time (a pinned priority group)."""

    def delay_for(self, attempt: int) -> float:
        return self.backoff_s[min(attempt - 1, len(self.backoff_s) - 1)]


@dataclass
class Delivery:
    """What a handler may know and do about the message it handles."""

    msg: Msg = field(repr=False)
    attempt: int
    followed: asyncio.Future[None] | None = field(default=None, repr=False)
    """Resolved once a later event of the same run waits behind this one in this replica
    (ordered consumers only)."""

    def has_successor(self) -> bool:
        """True while a later event of the same run waits behind this one: a handler may
        leave to it what the later event redoes."""
        return self.followed is not None and self.followed.done()

    async def successor_within(self, seconds: float) -> bool:
        """``has_successor``, waiting up to ``seconds`` for the run's next event to arrive."""
        if self.followed is not None:
            await asyncio.wait((self.followed,), timeout=seconds)  # never cancels it
        return self.has_successor()

    deferred_s: float | None = None
    """Set by ``defer``: the message comes back after this many seconds instead of being acked."""

    async def in_progress(self) -> None:
        """Reset the ack timer; the consumer also does this on a timer while handlers run."""
        await self.msg.in_progress()

    def defer(self, seconds: float) -> None:
        """Have this event delivered again in ``seconds`` once the handler returns (a
        deadline not reached yet): no slot is held meanwhile and the redelivery is not
        counted as a failed attempt."""
        if seconds < 0:
            raise ValueError(f"a deferral needs a delay of 0 s or more, not {seconds}")
        self.deferred_s = seconds


@dataclass(frozen=True)
class _RunTail:
    """The newest event of a run in this replica: later events of the run wait for it."""

    handled: asyncio.Future[None]
    followed: asyncio.Future[None]
    sequence: int
    """The event's stream sequence."""


UNKNOWN_TYPE_DELAY_S = 5.0
"""How long an event of a type this version does not know waits before it comes back:
during a rolling upgrade a newer replica sharing the durable takes it meanwhile."""
REBIND_PAUSE_S = 0.5
"""How long a consumer whose binding failed waits before it binds again."""
HEARTBEATS_PER_ACK_WAIT = 3
"""How many ``in_progress`` beats a running handler sends per ack wait."""
MIN_HEARTBEAT_S = 0.5
"""The shortest spacing of those beats, whatever the ack wait."""
PIN_TIMEOUT_S = 10.0
"""How long after the pinned replica's last pull the server pins another (at most the
ack wait): a crashed or cut-off replica's runs move on after this."""
Handler = Callable[[Envelope, Delivery], Awaitable[None]]
OnExhausted = Callable[[Envelope, BaseException], Awaitable[None]]


class EventConsumer:
    """Takes the service's durable consumer's messages through a ``PullFeed`` and runs
    ``handler`` per event."""

    def __init__(
        self, bus: Bus, spec: ConsumerSpec, handler: Handler, on_exhausted: OnExhausted
    ) -> None:
        self._bus = bus
        self._spec = dataclasses.replace(spec, ack_wait_s=faults.ack_wait_s(spec.ack_wait_s))
        self._handler = handler
        self._on_exhausted = on_exhausted
        self._tasks: set[asyncio.Task[None]] = set()
        self._run_tails: dict[str, _RunTail] = {}
        self._pin = Pin(group=durables.PIN_GROUP) if spec.ordered_by_run else None
        self._position = 0
        """The acknowledged floor this replica last recorded."""
        self._unrecorded: dict[int, BaseException] = {}
        """Why a message's step failed, by stream sequence, while its failure could not be
        recorded (the stream full, say): the next delivery records that reason."""
        self._deferred_at: dict[int, int] = {}
        """The delivery count at a message's last deferral, by stream sequence: deliveries
        up to it were deferrals, not attempts."""

    async def ensure_consumer(self) -> None:
        config = api.ConsumerConfig(
            durable_name=subjects.durable_name(self._spec.service),
            filter_subjects=list(self._spec.filters),
            # These three are the server's defaults for a durable pull consumer, stated
            # because the delivery rules rest on them: dropping one changes nothing.
            ack_policy=api.AckPolicy.EXPLICIT,  # pragma: no mutate
            deliver_policy=api.DeliverPolicy.ALL,  # pragma: no mutate
            ack_wait=self._spec.ack_wait_s,
            max_deliver=-1,  # pragma: no mutate  (exhaustion is counted here, not by the server)
            max_ack_pending=max(1000, self._spec.concurrency * 4),
        )
        if self._spec.ordered_by_run and durables.groups_supported(self._bus):
            config = durables.pinned(config, timeout_s=self.pin_timeout_s)
            self._pin = self._pin or Pin(group=durables.PIN_GROUP)
        elif self._spec.ordered_by_run:  # a server before 2.11: ordered per replica only
            log.warning("consumer.not_pinned", server=str(self._bus.nc.connected_server_version))
            self._pin = None
        # a missing durable starts after its recorded position
        config = await durables.prepared(self._bus, config)
        # rewritten only when it differs and no newer plnt version wrote it
        await ensure_durable(self._bus.js, subjects.STREAM, config)

    @property
    def pin_timeout_s(self) -> float:
        """Longer than the pinned feed's longest pause between pulls (one expiry)."""
        return max(3 * self._spec.pull_expires_s, min(PIN_TIMEOUT_S, self._spec.ack_wait_s))

    async def _unpin(self) -> None:
        """On stop, hand the pin on at once: a standby replica takes over without waiting
        out the priority timeout."""
        if self._pin is None or not self._pin.id:
            return
        durable = subjects.durable_name(self._spec.service)
        with contextlib.suppress(Exception):  # the pin then moves after its timeout
            await self._bus.nc.request(
                f"$JS.API.CONSUMER.UNPIN.{subjects.STREAM}.{durable}",
                json.dumps({"group": self._pin.group}).encode(),
                timeout=2,
            )
        self._pin.id = ""

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set, then wait for in-flight handlers."""
        durable = subjects.durable_name(self._spec.service)
        recording = asyncio.create_task(self._record_positions(stop))
        while not stop.is_set():
            try:
                await self.ensure_consumer()
                health.consumer_bound(durable, True)
                feed = PullFeed(
                    self._bus.nc,
                    stream=subjects.STREAM,
                    consumer=durable,
                    capacity=self._spec.concurrency,
                    expires_s=self._spec.pull_expires_s,
                    deliver=self._start,
                    pin=self._pin,
                )
                await feed.run(stop)
            except Exception as exc:  # the server went away or the binding went stale: re-bind
                health.consumer_bound(durable, False)
                if not stop.is_set():
                    log.warning("consumer.rebind", durable=durable, error=repr(exc))
                    await asyncio.sleep(REBIND_PAUSE_S)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        recording.cancel()
        if self._bus.nc.is_connected:  # with the server away there is nothing to tell it
            await self._record_position()
            await self._unpin()

    async def _record_positions(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=durables.POSITION_EVERY_S)
            if not stop.is_set():
                await self._record_position()

    async def _record_position(self) -> None:
        """Record the durable's acknowledged floor (see ``durables``); a failure is
        logged, the next record catches up."""
        durable = subjects.durable_name(self._spec.service)
        try:
            self._position = await durables.record_position(
                self._bus, durable, after=self._position
            )
        except Exception as exc:
            log.warning("consumer.position_not_recorded", durable=durable, error=repr(exc))

    def _start(self, msg: Msg, release: Callable[[], None]) -> None:
        task = asyncio.create_task(self._handle(msg))
        self._tasks.add(task)
        # Not mutated: a finished task left in the set would cost memory only.
        task.add_done_callback(self._tasks.discard)  # pragma: no mutate
        task.add_done_callback(lambda _: release())
        task.add_done_callback(_log_failure)

    async def _handle(self, msg: Msg) -> None:
        # The server counts every delivery from 1: the fallback is for the type only.
        delivered = msg.metadata.num_delivered or 1  # pragma: no mutate
        attempt = delivered - await self._deferrals(msg.metadata.sequence.stream, delivered)
        try:
            envelope = decode_event(msg.data)
        except UnknownEventType as exc:  # a newer version's: a newer replica handles it
            log.warning("consumer.unknown_event_type", subject=msg.subject, error=str(exc))
            await msg.nak(delay=UNKNOWN_TYPE_DELAY_S)
            return
        except SpecInvalid as exc:
            log.error("consumer.poison_message", subject=msg.subject, error=str(exc))
            await msg.term()
            return
        previous, tail = (
            self._queue_behind_run(envelope, msg.metadata.sequence.stream)
            if self._spec.ordered_by_run
            else (None, None)
        )
        # from now until the ack: waiting behind its run's earlier event is no reason to be
        # sent to another replica
        heartbeat = asyncio.create_task(self._keep_alive(msg))
        try:
            if previous is not None:
                await previous.handled
            with structlog.contextvars.bound_contextvars(
                sagaid=envelope.sagaid,
                event=envelope.event_type.value,
                namespace=envelope.namespace,
                name=envelope.name,
            ):
                await self._run_handler(
                    msg, envelope, attempt, tail.followed if tail is not None else None
                )
        finally:
            heartbeat.cancel()
            if tail is not None:
                tail.handled.set_result(None)
                # Not mutated: a handled tail left behind would cost memory only (a later
                # event of the run finds it handled and goes on).
                newest = self._run_tails.get(envelope.subject)  # pragma: no mutate
                if newest is tail:
                    del self._run_tails[envelope.subject]

    def _queue_behind_run(
        self, envelope: Envelope, sequence: int
    ) -> tuple[_RunTail | None, _RunTail | None]:
        """The run's previous event to wait for, and this event's own tail.

        Tasks start in fetch order, so the chain follows the stream's order per run. An
        event earlier in the stream than the run's newest here is a redelivery (its first
        delivery went to a replica that died): it runs at once and queues nothing, since
        the later event may be waiting for its effect (retried in place, it would hold the
        earlier one behind it until it gave up).
        """
        previous = self._run_tails.get(envelope.subject)
        if previous is not None and sequence < previous.sequence:
            return None, None
        loop = asyncio.get_running_loop()
        tail = _RunTail(
            handled=loop.create_future(), followed=loop.create_future(), sequence=sequence
        )
        if previous is not None:
            previous.followed.set_result(None)
        self._run_tails[envelope.subject] = tail
        return previous, tail

    async def _run_handler(
        self,
        msg: Msg,
        envelope: Envelope,
        attempt: int,
        followed: asyncio.Future[None] | None,
    ) -> None:
        """Run the handler on one delivery until it is acked, terminated or NAKed.

        An ordered consumer retries a failed event here after its back-off, so the run's
        later events wait behind it in this replica; the others NAK it with the back-off."""
        while True:
            with structlog.contextvars.bound_contextvars(attempt=attempt):
                delay = await self._attempt(msg, envelope, attempt, followed)
            if delay is None:
                return
            if not self._spec.ordered_by_run:
                await msg.nak(delay=delay)
                return
            await asyncio.sleep(delay)
            attempt += 1

    async def _attempt(
        self,
        msg: Msg,
        envelope: Envelope,
        attempt: int,
        followed: asyncio.Future[None] | None,
    ) -> float | None:
        """One handler run: the back-off before the next when it failed, else None (acked,
        terminated, or left to come back after the last back-off)."""
        started = time.perf_counter()
        outcome = "ok"
        if attempt > self._spec.max_attempts:
            last = self._unrecorded.get(msg.metadata.sequence.stream)
            await self._exhausted(
                msg, envelope, last or RuntimeError("delivery attempts exhausted")
            )
            return None
        delivery = Delivery(msg=msg, attempt=attempt, followed=followed)
        try:
            if tracing.ENABLED:  # the handler's span, child of the publisher's
                with saga_tracing.processing(msg, envelope, service=self._spec.service):
                    await self._handler(envelope, delivery)
            else:
                await self._handler(envelope, delivery)
        except Exception as exc:
            outcome = "error"
            if attempt >= self._spec.max_attempts:
                await self._exhausted(msg, envelope, exc)
                return None
            delay = self._spec.delay_for(attempt)
            retryable = isinstance(exc, PlntError) and exc.retryable
            log.warning(
                "handler.retry",
                error=str(exc) or repr(exc),
                retryable=retryable,
                delay_s=delay,
                exc_info=not retryable,
            )
            return delay
        finally:
            SAGA_STEP_DURATION.labels(
                self._spec.service, envelope.event_type.value, outcome
            ).observe(time.perf_counter() - started)
        SAGA_STEP_RUNS.labels(self._spec.service, envelope.event_type.value).inc()
        sequence = msg.metadata.sequence.stream
        if delivery.deferred_s is not None:
            # the next delivery starts its attempts afresh: this one did not fail
            delivered = msg.metadata.num_delivered or 1  # pragma: no mutate
            self._deferred_at[sequence] = delivered
            await self._record_deferral(sequence, delivered)
            await msg.nak(delay=delivery.deferred_s)
            return None
        if self._deferred_at.pop(sequence, None) is not None:
            with contextlib.suppress(Exception):  # a leftover record costs a key only
                await self._bus.sagas.delete(self._deferral_key(sequence))
        await faults.pause_point(self._spec.service, envelope.event_type.value, "before_ack")
        await msg.ack()
        return None

    def _deferral_key(self, sequence: int) -> str:
        return f"deferred.{subjects.durable_name(self._spec.service)}.{sequence}"

    async def _record_deferral(self, sequence: int, delivered: int) -> None:
        """Record the deferral in ``plnt-sagas`` too: a replica started after it (a
        restart) must not count the deferred deliveries as failed attempts."""
        try:
            await self._bus.sagas.put(self._deferral_key(sequence), str(delivered).encode())
        except Exception as exc:
            log.warning("consumer.deferral_not_recorded", sequence=sequence, error=repr(exc))

    async def _deferrals(self, sequence: int, delivered: int) -> int:
        """How many of a message's deliveries were deferrals (see ``Delivery.defer``)."""
        if sequence in self._deferred_at or delivered == 1:
            return self._deferred_at.get(sequence, 0)
        try:  # a redelivery this replica did not defer: another one, or before a restart
            entry = await self._bus.sagas.get(self._deferral_key(sequence))
        except Exception:  # none recorded (the usual case), or the bucket unreachable
            return 0
        self._deferred_at[sequence] = int(entry.value or b"0")
        return self._deferred_at[sequence]

    async def _exhausted(self, msg: Msg, envelope: Envelope, exc: BaseException) -> None:
        log.error("handler.exhausted", error=str(exc) or repr(exc))
        try:
            if tracing.ENABLED:  # the failure event it publishes joins the saga's trace
                with saga_tracing.processing(msg, envelope, service=self._spec.service):
                    await self._on_exhausted(envelope, exc)
            else:
                await self._on_exhausted(envelope, exc)
        except Exception as publish_error:  # could not record the failure: try again later
            log.error("handler.exhausted_publish_failed", error=repr(publish_error))
            self._unrecorded[msg.metadata.sequence.stream] = exc
            await msg.nak(delay=self._spec.backoff_s[-1])
            return
        self._unrecorded.pop(msg.metadata.sequence.stream, None)
        await msg.term()
        DEAD_LETTERS.labels(self._spec.service, envelope.event_type.value).inc()

    async def _keep_alive(self, msg: Msg) -> None:
        interval = max(MIN_HEARTBEAT_S, self._spec.ack_wait_s / HEARTBEATS_PER_ACK_WAIT)
        while True:
            await asyncio.sleep(interval)
            try:
                await msg.in_progress()
            except Exception as exc:  # the connection may be down; the next beat tries again
                # A debug trace only, not mutated.
                log.debug("consumer.in_progress_failed", error=repr(exc))  # pragma: no mutate


def _log_failure(task: "asyncio.Task[None]") -> None:
    """Say why a delivery's task failed outside its handler (an ack to a closed
    connection, a bug): unread, the error would surface only when the task is collected.
    The server delivers the event again after the ack wait."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("consumer.delivery_failed", error=repr(exc))
