"""Is this saga still the one to act on? The decision every saga step starts with.

A saga is superseded when the run's projection already follows a newer saga (a newer
generation, or the deletion saga); it has ended once a terminal event claimed its id.
Pure: ``plnt_common.bus.saga.observe_saga`` gathers the facts from the bus.
"""

from enum import StrEnum

from plnt_common.events import Envelope
from plnt_common.projection import RunProjection, saga_order


class SagaState(StrEnum):
    CURRENT = "current"
    """The newest saga of its run, not yet ended: act on it."""
    SUPERSEDED = "superseded"
    """A newer saga of the same run exists: compensate, never promote."""
    ENDED = "ended"
    """A terminal event was published already: do nothing more."""


def classify(event: Envelope, projection: RunProjection | None, ended: bool) -> SagaState:
    """Pure decision from what was observed."""
    if ended:
        return SagaState.ENDED
    newer = (
        projection is not None
        and bool(projection.saga_id)
        and saga_order(projection.saga_id) > saga_order(event.sagaid)
    )
    return SagaState.SUPERSEDED if newer else SagaState.CURRENT
