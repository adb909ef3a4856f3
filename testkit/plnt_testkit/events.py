"""Events as the services publish them, for tests that play one service's part."""

from plnt_common.events import Envelope, EventType, RunRequested, RunSnapshot, new_event, saga_id


def run_requested(run: RunSnapshot) -> Envelope:
    """The ``run.requested`` the watcher publishes for ``run``: its generation's first saga."""
    return new_event(
        EventType.RUN_REQUESTED,
        RunRequested(run=run),
        namespace=run.namespace,
        name=run.name,
        sagaid=saga_id(run.namespace, run.name, run.generation),
        generation=run.generation,
        source="test",
    )
