"""Is this saga still the one to act on? The decision every saga step starts with.

A saga is superseded once the run's latest saga (recorded by the watcher before it
publishes a new saga's first event) is another one: a newer generation, or the deletion.
It has ended once a terminal event claimed its id. Pure: ``plnt_common.bus.saga``
gathers the facts from the bus.
"""

from enum import StrEnum

from plnt_common.events import Envelope


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
