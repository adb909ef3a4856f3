"""Placement over several backends against a real nats-server: a canary goes to the first
backend of ``spec.placement`` with a node that has room, passing over full ones with their
reason, and concurrent placements over two backends book exactly the GPUs there are.

The installer's handlers run with the real local release backend and capacity source; the
test plays the local-backends (an observed Ready record for every desired release)."""

import asyncio
from collections import Counter
from typing import cast

from test_capacity_placement import Handed, bus, events_of, handlers, local_backend, placements

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.bus.kv_snapshot import kv_snapshot
from plnt_common.events import (
    BackendChoice,
    CanaryInstalled,
    CapacityAwaited,
    Envelope,
    EventType,
    RunSnapshot,
    SpecPulled,
    new_event,
)
from plnt_common.releases import DESIRED_PREFIX, DesiredRelease
from plnt_common.resources import PlntBackendSpec, WorkflowRunSpec
from plnt_installer.handlers import InstallerHandlers

__all__ = [
    "bus",
    "handlers",
    "local_backend",
    "placements",
]  # fixtures shared with the one-backend tests

GPUS_EACH = 4
SPEC = WorkflowRunSpec.model_validate(
    {
        "workflow": {"ref": "review-responder@1.2.0", "registry": "file:///registry"},
        "backend": {"gpuClass": "a100", "gpuCount": 1},
        "placement": {"backends": ["east", "west"]},
    }
)


def local(capacity: int) -> PlntBackendSpec:
    return PlntBackendSpec.model_validate(
        {
            "type": "local",
            "gpuClasses": {"a100": {"resourceName": "nvidia.com/gpu", "capacity": capacity}},
        }
    )


def pulled_event(name: str, east: PlntBackendSpec, west: PlntBackendSpec) -> Envelope:
    return placed_event(name, SPEC, ("east", east), ("west", west))


def placed_event(
    name: str, spec: WorkflowRunSpec, *backends: tuple[str, PlntBackendSpec]
) -> Envelope:
    """spec.pulled of ``name`` with ``backends`` acceptable, in order."""
    (first, backend), rest = backends[0], backends[1:]
    pulled = SpecPulled(
        run=RunSnapshot(namespace="default", name=name, generation=1, spec=spec),
        spec_digest="sha256:" + "0" * 64,
        workflow_name="review-responder",
        workflow_version="1.2.0",
        revision="1.2.0-g1",
        backend_name=first,
        backend=backend,
        fallbacks=tuple(BackendChoice(backend_name=n, backend=b) for n, b in rest),
    )
    return new_event(
        EventType.SPEC_PULLED,
        pulled,
        namespace="default",
        name=name,
        sagaid=f"default.{name}.1.1",
        generation=1,
        source="test",
    )


async def deliver(handlers: InstallerHandlers, events: list[Envelope]) -> list[str]:
    handed = {event.name: Handed() for event in events}
    await asyncio.gather(*(handlers.handle(e, cast(Delivery, handed[e.name])) for e in events))
    return sorted(name for name, h in handed.items() if h.deferred_s is not None)


async def backends_of_installed(bus: Bus) -> Counter[str]:
    desired = await kv_snapshot(bus.nc, subjects.RELEASES_BUCKET, f"{DESIRED_PREFIX}.>")
    return Counter(DesiredRelease.model_validate_json(v).backend_name for _, v in desired.values())


async def test_a_full_first_backend_is_passed_over_with_its_reason(
    bus: Bus, local_backend: None, handlers: InstallerHandlers
) -> None:
    east, west = local(1), local(2)
    assert await deliver(handlers, [pulled_event("first", east, west)]) == []
    assert await deliver(handlers, [pulled_event("spilled", east, west)]) == []

    assert await backends_of_installed(bus) == Counter({"east": 1, "west": 1})
    first, spilled = await events_of(bus, EventType.CANARY_INSTALLED)
    assert first.payload().backend == "east"
    data = spilled.payload()
    assert isinstance(data, CanaryInstalled)
    assert data.backend == "west"
    assert [(e.backend, e.state) for e in data.placement] == [
        ("west", "Installing"),
        ("east", "Skipped"),
    ]
    assert data.placement[1].reason == ("NoCapacity: no node has 1 free nvidia.com/gpu (largest 0)")


async def test_twenty_runs_over_two_backends_of_four_install_exactly_eight(
    bus: Bus, local_backend: None, handlers: InstallerHandlers
) -> None:
    events = [pulled_event(f"agent-{i:02d}", local(GPUS_EACH), local(GPUS_EACH)) for i in range(20)]

    pending = await deliver(handlers, events)

    # no overcommit on either backend, and the first in order filled first
    assert await backends_of_installed(bus) == Counter({"east": GPUS_EACH, "west": GPUS_EACH})
    assert len(pending) == 20 - 2 * GPUS_EACH
    awaited = await events_of(bus, EventType.CAPACITY_AWAITED)
    data = awaited[0].payload()
    assert isinstance(data, CapacityAwaited)
    assert data.message == (
        "PlntBackend 'east': no node has 1 free nvidia.com/gpu (largest 0); "
        "PlntBackend 'west': no node has 1 free nvidia.com/gpu (largest 0)"
    )
    assert [(e.backend, e.state) for e in data.placement] == [
        ("east", "Skipped"),
        ("west", "Skipped"),
    ]


async def test_a_pending_run_whose_reason_changes_says_the_new_one(
    bus: Bus, local_backend: None, handlers: InstallerHandlers
) -> None:
    def needing(gpus: int) -> WorkflowRunSpec:
        return SPEC.model_copy(
            update={"backend": SPEC.backend.model_copy(update={"gpu_count": gpus})}
        )

    big = placed_event("big", needing(3), ("east", local(2)))
    assert await deliver(handlers, [big]) == ["big"]
    assert await deliver(handlers, [placed_event("small", needing(1), ("east", local(2)))]) == []
    assert await deliver(handlers, [big]) == ["big"]

    said = [e.payload().message for e in await events_of(bus, EventType.CAPACITY_AWAITED)]
    assert said == [
        "PlntBackend 'east': no node has 3 free nvidia.com/gpu (largest 2)",
        "PlntBackend 'east': no node has 3 free nvidia.com/gpu (largest 1)",
    ]
