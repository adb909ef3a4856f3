"""A standing pull request on a durable consumer, topped up as handlers free room.

Why not nats-py's ``fetch``: one message per fetch is one pull request per delivery (a
request, the message and the ack: three messages through the server), and a fetch of a
batch returns only when its request ends. Here one pull request asks for all the free
room and is renewed when it ends, so a burst costs about two messages per delivery (the
message and its ack), and each message is handed on the moment it arrives.

One request is open at a time, which keeps the accounting exact: it ends when the server
has delivered its batch, or when it expires (a 408 status, sent no earlier than its
expiry), or, when the server forgot it (a restart), once its expiry and a grace have
passed here. A request the server forgets twice in a row while connected means the
binding is stale: ``run`` raises so the caller re-binds.

With a ``Pin`` the feed pulls in a priority group of a ``pinned_client`` consumer (see
``consumer``): the server delivers to one pinned feed at a time, whose requests carry the
pin id it was given (``Nats-Pin-Id``). The pinned feed keeps its pin by pulling at least
every expiry: while it has no room for messages it sends a request that can deliver none
(one byte at most), which the server ends at once or at its expiry. A 423 answer says the
pin moved to another client: the feed forgets its id and pulls as a candidate again.
"""

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import api

from plnt_common.logs import get_logger

log = get_logger(__name__)
LOST_AFTER_S = 0.5
"""Grace after a request's expiry before it counts as forgotten by the server."""
POLL_S = 0.1
"""How often ``run`` looks for a stop or a forgotten request."""
STATUS_HEADER = api.Header.STATUS
ENDS_REQUEST = {api.StatusCode.REQUEST_TIMEOUT, api.StatusCode.CONFLICT}
NO_RESPONDERS = "503"
PIN_MISMATCH = "423"
PIN_HEADER = "Nats-Pin-Id"
NS_PER_S = 1_000_000_000


@dataclass
class Pin:
    """A pinned consumer's priority group and the pin id the server gave this client
    ("" while it holds none); kept across feeds, so a re-bound feed keeps its pin."""

    group: str
    id: str = ""


@dataclass
class _Request:
    remaining: int
    deadline: float


class PullFeed:
    """Feeds a durable consumer's messages to ``deliver`` with the callback to call once
    the message is handled; never more than ``capacity`` unhandled at a time."""

    def __init__(
        self,
        nc: Client,
        *,
        stream: str,
        consumer: str,
        capacity: int,
        expires_s: float,
        deliver: Callable[[Msg, Callable[[], None]], None],
        pin: Pin | None = None,
    ) -> None:
        self._nc = nc
        self._next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._capacity = capacity
        self._threshold = max(1, capacity // 2)
        self._expires_s = expires_s
        self._deliver = deliver
        self._inbox = nc.new_inbox()
        self._in_flight = 0
        self._open: _Request | None = None
        self._stopping = False  # pragma: no mutate (None reads the same)
        self._lost_in_a_row = 0
        self._error: Exception | None = None
        self._pin = pin
        self._pin_inbox = nc.new_inbox()
        self._pin_kept_at = 0.0

    def release(self) -> None:
        """A delivered message was handled: its room can be asked for again."""
        self._in_flight -= 1
        self._top_up()

    async def run(self, stop: asyncio.Event) -> None:
        """Feed until ``stop``, then until the open request ended (its messages are
        delivered as usual). Raises when the binding went stale."""
        sub = await self._nc.subscribe(self._inbox, cb=self._on_message)
        pin_sub = await self._nc.subscribe(self._pin_inbox, cb=self._on_pin_answer)
        try:
            while not (self._stopping and self._open is None):
                self._stopping = stop.is_set()
                self._drop_if_lost()
                if self._error is not None:
                    raise self._error
                self._top_up()
                self._keep_pin()
                await asyncio.sleep(POLL_S)
        finally:
            # Handlers still running release into this feed: it must ask for nothing more
            # once its inbox is gone (messages sent there would wait out the ack timeout).
            self._stopping = True
            with contextlib.suppress(Exception):  # a closed connection took it already
                await sub.unsubscribe()
            with contextlib.suppress(Exception):
                await pin_sub.unsubscribe()

    async def _on_message(self, msg: Msg) -> None:
        headers = msg.headers or {}
        status = headers.get(STATUS_HEADER)
        if status is None:
            if self._pin is not None and (pin_id := headers.get(PIN_HEADER)):
                if pin_id != self._pin.id:
                    log.info("pull.pinned", consumer=self._next_subject.rsplit(".", 1)[-1])
                self._pin.id = pin_id
            self._in_flight += 1
            if self._open is not None:
                self._open.remaining -= 1
                if self._open.remaining <= 0:
                    self._end_request()
            self._deliver(msg, self.release)
            return
        if status == NO_RESPONDERS:  # the consumer is gone (a server that lost its store)
            self._error = ConnectionError("no consumer answers the pull request")
            self._open = None
            return
        if status == PIN_MISMATCH:  # the pin moved on: this request is over
            self._pin_lost()
            self._end_request()
            return
        if status not in ENDS_REQUEST:
            return  # an idle heartbeat or flow control: nothing asked for them
        # Not mutated: the server's statuses always carry a description.
        description = headers.get(api.Header.DESCRIPTION, "")  # pragma: no mutate
        if "Consumer Deleted" in description:
            self._error = ConnectionError("the consumer was deleted")
        # A 408 comes no earlier than the request's expiry: an earlier one is for a
        # request this feed already gave up on. A 409 that ends the request early (a
        # leader change, too many waiting requests) is left to the lost-request rule, so
        # a refusal is retried after the expiry, never in a busy loop.
        # Not mutated: `>` or a third instead of half the expiry move the line between a
        # request's own 408 and a stale one by an instant or a sixth of the expiry; a 408
        # comes at the expiry or for a request given up on a whole expiry before.
        if self._open is not None and asyncio.get_running_loop().time() >= (  # pragma: no mutate
            self._open.deadline - self._expires_s / 2  # pragma: no mutate
        ):
            self._end_request()

    async def _on_pin_answer(self, msg: Msg) -> None:
        """The answer to a request that only keeps the pin: all but a 423 say nothing."""
        if (msg.headers or {}).get(STATUS_HEADER) == PIN_MISMATCH:
            self._pin_lost()

    def _pin_lost(self) -> None:
        if self._pin is not None and self._pin.id:
            log.warning("pull.pin_lost", consumer=self._next_subject.rsplit(".", 1)[-1])
            self._pin.id = ""

    def _keep_pin(self) -> None:
        """While no request is open (no room), pull nothing once an expiry, to keep the pin."""
        if self._pin is None or not self._pin.id or self._open is not None:
            return
        if self._stopping or not self._nc.is_connected:
            return
        now = asyncio.get_running_loop().time()
        if now < self._pin_kept_at + self._expires_s:
            return
        self._pin_kept_at = now
        request = dict(
            batch=1,
            max_bytes=1,  # no message fits: the server answers 409 at once, or 408
            expires=int(self._expires_s * NS_PER_S),
            group=self._pin.group,
            id=self._pin.id,
        )
        sending = asyncio.ensure_future(
            self._nc.publish(
                self._next_subject, json.dumps(request).encode(), reply=self._pin_inbox
            )
        )
        sending.add_done_callback(_log_failed_send)  # pragma: no mutate (a debug trace)

    def _end_request(self) -> None:
        self._open = None
        self._lost_in_a_row = 0
        self._top_up()

    def _drop_if_lost(self) -> None:
        if self._open is None:
            return
        lost_at = self._open.deadline + LOST_AFTER_S
        # not mutated: `<=` differs only at that instant
        if asyncio.get_running_loop().time() < lost_at:  # pragma: no mutate
            return
        self._open = None
        if self._nc.is_connected:
            self._lost_in_a_row += 1
            if self._lost_in_a_row >= 2:
                self._error = ConnectionError("pull requests go unanswered")

    def _top_up(self) -> None:
        if self._stopping or self._open is not None or not self._nc.is_connected:
            return
        room = self._capacity - self._in_flight
        # Idle, ask for all the room; busy, wait until half of it is free (at least one
        # slot, so never an empty request), so a burst costs one request per several
        # deliveries.
        if self._in_flight and room < self._threshold:
            return
        self._open = _Request(
            remaining=room, deadline=asyncio.get_running_loop().time() + self._expires_s
        )
        # Keyword names (mutmut leaves them alone): the server reads JSON names without
        # regard to case, so a recased key would make the same request.
        request: dict[str, object] = dict(batch=room, expires=int(self._expires_s * NS_PER_S))
        if self._pin is not None:
            request["group"] = self._pin.group
            if self._pin.id:
                request["id"] = self._pin.id
        sending = asyncio.ensure_future(
            self._nc.publish(self._next_subject, json.dumps(request).encode(), reply=self._inbox)
        )
        sending.add_done_callback(_log_failed_send)  # pragma: no mutate (a debug trace)


def _log_failed_send(sending: "asyncio.Future[None]") -> None:  # pragma: no mutate block
    # A debug trace, not mutated: the request then goes unanswered and is renewed after
    # its expiry.
    if not sending.cancelled() and sending.exception() is not None:
        log.debug("pull.request_not_sent", error=repr(sending.exception()))
