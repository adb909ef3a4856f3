"""Events as the services publish them, for tests that play one service's part."""

from plnt_common.events import Envelope, EventType, RunRequested, RunSnapshot, new_event, saga_id
from plnt_common.resources import PlacementEntry, WorkflowRunSpec

WALKED_SPEC = WorkflowRunSpec.model_validate(
    {
        "workflow": {"ref": "wf@2.0.0", "registry": "file:///registry"},
        "backend": {"gpuClass": "a100", "gpuCount": 1},
        "placement": {"backends": ["east", "west"], "spread": 2},
        "canary": {"trafficPercent": 5, "steps": [50], "stepInterval": "2s"},
    }
)
"""A run spread over east and west whose canary steps walk them one at a time."""
WALKED_RUN = RunSnapshot(namespace="default", name="wf", generation=2, spec=WALKED_SPEC)


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
