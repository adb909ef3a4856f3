"""Events as the services publish them, for tests that play one service's part."""

from plnt_common.events import Envelope, EventType, RunRequested, RunSnapshot, new_event, saga_id
from plnt_common.resources import PlacementEntry


def run_requested(run: RunSnapshot, *, lost: tuple[PlacementEntry, ...] = ()) -> Envelope:
    """The ``run.requested`` the watcher publishes for ``run``: its generation's first saga
    (with ``lost``: the replacement of a copy lost on those backends)."""
    return new_event(
        EventType.RUN_REQUESTED,
        RunRequested(run=run, lost=lost),
        namespace=run.namespace,
        name=run.name,
        sagaid=saga_id(run.namespace, run.name, run.generation),
        generation=run.generation,
        source="test",
    )
