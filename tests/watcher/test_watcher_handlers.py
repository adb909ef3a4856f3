"""The watcher's event handler against a real nats-server."""

from typing import Any

from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.events import (
    EventType,
    RunRequested,
    RunSnapshot,
    SpecPulled,
    follow_up,
    new_event,
    saga_id,
)
from plnt_common.resources import PlntBackendSpec, WorkflowRunSpec
from plnt_watcher.adapters.projections import ProjectionStore
from plnt_watcher.handlers import ProjectionHandlers

SPEC = WorkflowRunSpec.model_validate(
    {"workflow": {"ref": "wf@1.0.0", "registry": "file:///registry"}, "backend": {"cluster": "c"}}
)


class RecordingStatus:
    """Stands in for ConvergingStatus at our own port: records what would be written."""

    def __init__(self) -> None:
        self.writes: list[dict[str, Any]] = []

    async def write_folded(
        self, *, namespace: str, name: str, status: dict[str, Any], revision: int
    ) -> bool:
        self.writes.append(status)
        return True

    async def release_finalizer(self, *, namespace: str, name: str, finalizer: str) -> None:
        raise AssertionError("not removed")


async def test_a_redelivered_event_writes_the_status_again(nats_url: str) -> None:
    bus = await Bus.open(nats_url, service="test")
    status = RecordingStatus()
    handlers = ProjectionHandlers(
        bus=bus,
        projections=ProjectionStore(bus.runs),
        source=status,  # type: ignore[arg-type]
    )
    event = new_event(
        EventType.RUN_REQUESTED,
        RunRequested(run=RunSnapshot(namespace="default", name="wf", generation=1, spec=SPEC)),
        namespace="default",
        name="wf",
        sagaid=saga_id("default", "wf", 1),
        generation=1,
        source="test",
    )
    pulled = follow_up(
        event,
        EventType.SPEC_PULLED,
        SpecPulled(
            run=event.payload().run,
            spec_digest="sha256:" + "a" * 64,
            workflow_name="wf",
            workflow_version="1.0.0",
            revision="1.0.0-g1",
            backend_name="c",
            backend=PlntBackendSpec(type="local"),
        ),
        source="test",
    )
    delivery = Delivery(msg=None, attempt=1)  # type: ignore[arg-type]
    await handlers.handle(event, delivery)
    await handlers.handle(pulled, delivery)
    # the first delivery folded the event, then its status write failed; it comes back
    await handlers.handle(pulled, delivery)
    assert [w["phase"] for w in status.writes] == ["Pulling", "Installing", "Installing"]
    await bus.close()
