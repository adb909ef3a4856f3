"""A new revision of a run spread over two backends, with canary steps, walks them: the
installer installs east's copy alone, and west's only when east's steps passed, placing
it then (a west with no room waits, its GPUs never booked before its turn); a step
redelivered after west's copy is out installs nothing again."""

from typing import cast

import pytest
from prometheus_client import REGISTRY
from test_capacity_placement import Handed, bus, events_of, local_backend
from test_capacity_spillover import local, placed_event
from test_capacity_spread import installed_releases

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.bus.kv_snapshot import kv_snapshot
from plnt_common.events import (
    AnalysisVerdict,
    CanaryInstalled,
    Envelope,
    EventType,
    SpecPulled,
    follow_up,
    new_event,
    saga_id,
)
from plnt_common.releases import DESIRED_PREFIX, DesiredRelease, ReleaseRole
from plnt_common.resources import AnalysisStatus, WorkflowRunSpec
from plnt_installer.adapters.capacity_sources import LocalCapacitySource
from plnt_installer.adapters.capacity_store import CapacityStore
from plnt_installer.adapters.local_releases import LocalReleaseBackend
from plnt_installer.handlers import InstallerHandlers
from plnt_installer.placement import Placements

__all__ = ["bus", "local_backend"]  # shared fixtures

WALKED = WorkflowRunSpec.model_validate(
    {
        "workflow": {"ref": "review-responder@1.2.0", "registry": "file:///registry"},
        "backend": {"gpuClass": "a100", "gpuCount": 1},
        "placement": {"backends": ["east", "west"], "spread": 2},
        "canary": {"trafficPercent": 5, "steps": [50], "stepInterval": "1s"},
    }
)
EAST, WEST = local(2), local(2)


@pytest.fixture
async def handlers(bus: Bus) -> InstallerHandlers:
    kv = await bus.js.key_value(subjects.CAPACITY_BUCKET)
    # every placement observes afresh: the test frees room and places again at once
    placements = Placements(
        sources={"local": LocalCapacitySource(nc=bus.nc)}, book=CapacityStore(kv), max_age_s=0
    )
    return InstallerHandlers(
        bus=bus,
        backends={"local": LocalReleaseBackend(bus)},
        ready_timeout_s=10,
        uninstall_timeout_s=10,
        placements=placements,
        capacity_retry_s=0.1,
    )


async def made_stable(bus: Bus) -> None:
    """Every desired release becomes the stable, as run.ready would make it."""
    desired = await kv_snapshot(bus.nc, subjects.RELEASES_BUCKET, f"{DESIRED_PREFIX}.>")
    for key, (_, value) in desired.items():
        release = DesiredRelease.model_validate_json(value)
        stable = release.model_copy(update={"role": ReleaseRole.STABLE})
        await bus.releases.put(key, stable.model_dump_json().encode())


def installs() -> float:
    labels = {"service": "installer", "effect": "canary_install"}
    return REGISTRY.get_sample_value("plnt_side_effects_total", labels) or 0.0


def second_generation(first: Envelope) -> Envelope:
    data: SpecPulled = first.payload()
    run = data.run.model_copy(update={"generation": 2})
    pulled = data.model_copy(update={"run": run, "revision": "1.3.0-g2"})
    return new_event(
        EventType.SPEC_PULLED,
        pulled,
        namespace="default",
        name=run.name,
        sagaid=saga_id("default", run.name, 2),
        generation=2,
        source="test",
    )


async def last_installed(bus: Bus, sagaid: str) -> tuple[Envelope, CanaryInstalled]:
    found = [e for e in await events_of(bus, EventType.CANARY_INSTALLED) if e.sagaid == sagaid]
    data = found[-1].payload()
    assert isinstance(data, CanaryInstalled)
    return found[-1], data


def east_passed(installed: Envelope, data: CanaryInstalled) -> Envelope:
    verdict = AnalysisVerdict(
        canary=data.canary,
        plan=WALKED.canary,
        step=1,
        traffic_percent=50,
        figures=AnalysisStatus(step="1/2 on east", passed=True, reason="40 calls"),
        walk=data.canary.walk,
        backend="east",
    )
    return follow_up(installed, EventType.ANALYSIS_PASSED, verdict, source="test")


async def test_the_next_backends_copy_is_installed_only_once_the_walk_reaches_it(
    bus: Bus, local_backend: None, handlers: InstallerHandlers
) -> None:
    first = placed_event("walk", WALKED, ("east", EAST), ("west", WEST))
    await handlers.handle(first, cast(Delivery, Handed()))
    await made_stable(bus)

    pulled = second_generation(first)
    await bus.publish(pulled)  # the walk's later copies are placed from the stream's
    await handlers.handle(pulled, cast(Delivery, Handed()))
    assert set(await installed_releases(bus)) == {
        "default-walk-g1",
        "default-walk-g1-west",
        "default-walk-g2",
    }
    installed, data = await last_installed(bus, pulled.sagaid)
    assert (data.canary.walk, data.canary.spread, data.backend) == (("east", "west"), (), "east")
    assert [(e.backend, e.state, e.reason) for e in data.placement] == [
        ("east", "Installing", ""),
        ("west", "Installing", "walk 2/2: installed once east's steps pass"),
    ]

    # west is full when the walk reaches it: the step is retried, nothing installed
    filler = placed_event("filler", WALKED, ("west", WEST))
    await handlers.handle(filler, cast(Delivery, Handed()))
    waiting = Handed()
    await handlers.handle(east_passed(installed, data), cast(Delivery, waiting))
    assert waiting.deferred_s == 0.1
    assert "default-walk-g2-west" not in await installed_releases(bus)

    await bus.releases.delete(f"{DESIRED_PREFIX}.default.default-filler-g1")
    await handlers.handle(east_passed(installed, data), cast(Delivery, Handed()))
    assert (await installed_releases(bus))["default-walk-g2-west"] == "west"
    _, west = await last_installed(bus, pulled.sagaid)
    assert west.backend == "west" and west.continues_walk()
    assert [(c.backend, c.release) for c in west.canary.spread] == [
        ("west", "default-walk-g2-west")
    ]
    assert [(e.backend, e.reason) for e in west.placement] == [("east", ""), ("west", "")]


async def test_a_first_rollout_installs_every_copy_at_once(
    bus: Bus, local_backend: None, handlers: InstallerHandlers
) -> None:
    """No stable serves beside it: nothing to judge a copy against, so no walk."""
    await handlers.handle(
        placed_event("first", WALKED, ("east", EAST), ("west", WEST)), cast(Delivery, Handed())
    )
    assert set(await installed_releases(bus)) == {"default-first-g1", "default-first-g1-west"}
    (installed,) = await events_of(bus, EventType.CANARY_INSTALLED)
    assert installed.payload().canary.walk == ()


async def test_a_redelivered_step_once_the_next_copy_is_out_installs_nothing_again(
    bus: Bus, local_backend: None, handlers: InstallerHandlers
) -> None:
    uncounted = local(0)  # no GPUs counted: nothing but the walk itself says "done"
    first = placed_event("again", WALKED, ("east", uncounted), ("west", uncounted))
    await handlers.handle(first, cast(Delivery, Handed()))
    await made_stable(bus)
    pulled = second_generation(first)
    await bus.publish(pulled)
    await handlers.handle(pulled, cast(Delivery, Handed()))
    installed, data = await last_installed(bus, pulled.sagaid)
    await handlers.handle(east_passed(installed, data), cast(Delivery, Handed()))
    assert (await last_installed(bus, pulled.sagaid))[1].backend == "west"

    before = installs()
    await handlers.handle(east_passed(installed, data), cast(Delivery, Handed()))
    assert installs() == before
