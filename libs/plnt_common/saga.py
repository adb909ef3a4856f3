"""Is this saga still the one to act on? The decision every saga step starts with.

A saga is superseded once the run's latest saga (recorded by the watcher before it
publishes a new saga's first event) is another one: a newer generation, or the deletion.
It has ended once a terminal event claimed its id. Pure: ``plnt_common.bus.saga``
gathers the facts from the bus.
"""

from dataclasses import dataclass
from enum import StrEnum

from plnt_common.errors import SpecInvalid
from plnt_common.events import Envelope, decode_event


class SagaState(StrEnum):
    CURRENT = "current"
    """The latest saga of its run, not yet ended: act on it."""
    SUPERSEDED = "superseded"
    """A newer saga of the same run exists: compensate, never promote."""
    ENDED = "ended"
    """A terminal event was published already: do nothing more."""


def classify(event: Envelope, latest: str, ended: bool) -> SagaState:
    """Pure decision from the run's latest saga id ("" when unknown) and the claim."""
    if ended:
        return SagaState.ENDED
    if latest and latest != event.sagaid:
        return SagaState.SUPERSEDED
    return SagaState.CURRENT


@dataclass(frozen=True)
class TerminalClaim:
    """The value of a saga's terminal claim: the terminal event that won it.

    The claim holds the whole event so that the delivery that claimed it can publish it
    again after a crash between claiming and publishing (``observe_saga``). Claims written
    before that hold only the event type (``event`` is None).
    """

    event_type: str
    event: Envelope | None = None

    @classmethod
    def of(cls, event: Envelope) -> "TerminalClaim":
        return cls(event.event_type.value, event)

    def encode(self) -> bytes:
        return self.event.model_dump_json().encode() if self.event else self.event_type.encode()

    @classmethod
    def decode(cls, raw: bytes) -> "TerminalClaim":
        if not raw.startswith(b"{"):
            return cls(raw.decode(errors="replace"))
        try:
            event = decode_event(raw)
        except SpecInvalid:
            return cls("")  # unreadable, but a claim all the same: the saga has ended
        return cls(event.event_type.value, event)
