"""``spec.placement.spread`` against a real nats-server: the canary is installed on the
first N backends with room, each under a release name of its own, the saga hands on one
address per backend, and a failed saga removes the canary from every backend.

The installer's handlers run with the real local release backend and capacity source; the
test plays the local-backends (an observed Ready record for every desired release)."""

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import cast

import pytest
from test_capacity_placement import (
    Handed,
    bus,
    events_of,
    handlers,
    local_backend,
    placements,
    play_local_backend,
)
from test_capacity_spillover import backends_of_installed, local, placed_event

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.bus.kv_snapshot import kv_snapshot
from plnt_common.events import (
    CanaryInstalled,
    Envelope,
    EventType,
    InstallFailed,
    RouteRestored,
    SpecPulled,
    follow_up,
    new_event,
)
from plnt_common.releases import DESIRED_PREFIX, DesiredRelease
from plnt_common.resources import PlacementEntry, PlntBackendSpec, WorkflowRunSpec
from plnt_common.status import Reason
from plnt_common.tasks import cancelled
from plnt_installer.handlers import InstallerHandlers

__all__ = ["bus", "handlers", "local_backend", "placements"]  # shared fixtures

SPREAD_TWO = WorkflowRunSpec.model_validate(
    {
        "workflow": {"ref": "review-responder@1.2.0", "registry": "file:///registry"},
        "backend": {"gpuClass": "a100", "gpuCount": 1},
        "placement": {"backends": ["east", "west", "burst"], "spread": 2},
    }
)


def spread_event(name: str, *backends: tuple[str, PlntBackendSpec]) -> Envelope:
    return placed_event(name, SPREAD_TWO, *backends)


async def installed_releases(bus: Bus) -> dict[str, str]:
    """Release name -> the backend it was asked of."""
    desired = await kv_snapshot(bus.nc, subjects.RELEASES_BUCKET, f"{DESIRED_PREFIX}.>")
    records = [DesiredRelease.model_validate_json(v) for _, v in desired.values()]
    return {r.release: r.backend_name for r in records}


async def test_spread_two_installs_on_the_first_two_backends_under_names_of_their_own(
    bus: Bus, local_backend: None, handlers: InstallerHandlers
) -> None:
    event = spread_event("spread", ("east", local(1)), ("west", local(1)), ("burst", local(1)))

    await handlers.handle(event, cast(Delivery, Handed()))

    assert await installed_releases(bus) == {
        "default-spread-g1": "east",
        "default-spread-g1-west": "west",
    }
    (installed,) = await events_of(bus, EventType.CANARY_INSTALLED)
    data = installed.payload()
    assert isinstance(data, CanaryInstalled)
    assert (data.canary.backend, data.canary.release) == ("east", "default-spread-g1")
    assert [(c.backend, c.release, c.url) for c in data.canary.spread] == [
        ("west", "default-spread-g1-west", "http://127.0.0.1:1/default-spread-g1-west")
    ]
    assert [(e.backend, e.state) for e in data.placement] == [
        ("east", "Installing"),
        ("west", "Installing"),
    ]


async def test_a_full_backend_is_passed_over_and_the_next_that_fits_takes_its_place(
    bus: Bus, local_backend: None, handlers: InstallerHandlers
) -> None:
    east, west, burst = local(1), local(1), local(1)
    await handlers.handle(spread_event("filler", ("east", east)), cast(Delivery, Handed()))

    event = spread_event("passed", ("east", east), ("west", west), ("burst", burst))
    await handlers.handle(event, cast(Delivery, Handed()))

    assert await backends_of_installed(bus) == Counter({"east": 1, "west": 1, "burst": 1})
    _, installed = await events_of(bus, EventType.CANARY_INSTALLED)
    data = installed.payload()
    assert isinstance(data, CanaryInstalled)
    assert (data.canary.backend, data.canary.release) == ("west", "default-passed-g1")
    assert [c.release for c in data.canary.spread] == ["default-passed-g1-burst"]
    assert [(e.backend, e.state) for e in data.placement] == [
        ("west", "Installing"),
        ("burst", "Installing"),
        ("east", "Skipped"),
    ]


async def test_fewer_backends_with_room_than_spread_still_places_on_those(
    bus: Bus, local_backend: None, handlers: InstallerHandlers
) -> None:
    east, west = local(1), local(1)
    await handlers.handle(spread_event("filler", ("west", west)), cast(Delivery, Handed()))

    event = spread_event("fewer", ("east", east), ("west", west))
    await handlers.handle(event, cast(Delivery, Handed()))

    assert await installed_releases(bus) == {
        "default-filler-g1": "west",
        "default-fewer-g1": "east",
    }
    _, installed = await events_of(bus, EventType.CANARY_INSTALLED)
    data = installed.payload()
    assert isinstance(data, CanaryInstalled) and data.canary.spread == ()
    assert [(e.backend, e.state) for e in data.placement] == [
        ("east", "Installing"),
        ("west", "Skipped"),
    ]


async def test_a_failed_saga_removes_its_canary_from_every_backend(
    bus: Bus, local_backend: None, handlers: InstallerHandlers
) -> None:
    event = spread_event("failed", ("east", local(1)), ("west", local(1)))
    await handlers.handle(event, cast(Delivery, Handed()))
    assert len(await installed_releases(bus)) == 2

    restored = RouteRestored(
        revision="1.2.0-g1",
        release="default-failed-g1",
        reason=Reason.SMOKE_FAILED,
        message="the smoke test failed",
    )
    await handlers.handle(
        follow_up(event, EventType.ROUTE_RESTORED, restored, source="test"),
        cast(Delivery, Handed()),
    )

    assert await installed_releases(bus) == {}
    (ended,) = await events_of(bus, EventType.RUN_FAILED)
    assert ended.payload().reason is Reason.SMOKE_FAILED


async def test_an_install_failure_after_the_canary_was_installed_waits_for_the_route(
    bus: Bus, local_backend: None, handlers: InstallerHandlers
) -> None:
    """Once canary.installed is out the canary may take live calls: removing it before
    the promoter restores the route would send them to a runner that is gone."""
    event = spread_event("late", ("east", local(1)), ("west", local(1)))
    await handlers.handle(event, cast(Delivery, Handed()))
    failed = InstallFailed(
        reason=Reason.INSTALL_FAILED,
        message="the walk's next copy failed",
        revision="1.2.0-g1",
        release="default-late-g1-west",
    )
    await handlers.handle(
        follow_up(event, EventType.INSTALL_FAILED, failed, source="test"),
        cast(Delivery, Handed()),
    )

    assert len(await installed_releases(bus)) == 2
    assert await events_of(bus, EventType.RUN_FAILED) == []


@pytest.fixture
async def copies_ready_together(bus: Bus) -> AsyncIterator[None]:
    """A copy serves only once its run's other copy is installed too: an installer that
    waited for one copy before installing the next would wait forever."""

    def both_installed(release: DesiredRelease, wanted: list[DesiredRelease]) -> bool:
        return sum(r.run_name == release.run_name for r in wanted) == 2

    task = asyncio.create_task(play_local_backend(bus, both_installed))
    yield
    await cancelled(task)


async def test_every_copy_is_installed_before_any_is_waited_on(
    bus: Bus, copies_ready_together: None, handlers: InstallerHandlers
) -> None:
    event = spread_event("together", ("east", local(1)), ("west", local(1)))

    try:
        await asyncio.wait_for(handlers.handle(event, cast(Delivery, Handed())), timeout=8)
    except TimeoutError:
        pytest.fail("the installer waited for the first copy before installing the second")

    assert [e.event_type for e in await events_of(bus, EventType.INSTALL_FAILED)] == []
    (installed,) = await events_of(bus, EventType.CANARY_INSTALLED)
    assert [c.backend for c in installed.payload().canary.spread] == ["west"]


async def test_a_replacement_installs_only_the_copies_missing_beside_the_kept_ones(
    bus: Bus, local_backend: None, handlers: InstallerHandlers
) -> None:
    event = spread_event("replaced", ("burst", local(1)), ("extra", local(1)))
    pulled = event.payload()
    assert isinstance(pulled, SpecPulled)
    standing = (
        PlacementEntry(backend="east", state="Lost", reason="RunnerFailed: replaced"),
        PlacementEntry(backend="west", state="Serving"),
    )
    replacing = new_event(
        EventType.SPEC_PULLED,
        pulled.model_copy(update={"passed_over": standing}),
        namespace="default",
        name="replaced",
        sagaid="default.replaced.1.2",
        generation=1,
        source="test",
    )

    await handlers.handle(replacing, cast(Delivery, Handed()))

    # one copy beside west's, named after its backend (the plain name is held on east)
    assert await installed_releases(bus) == {"default-replaced-g1-burst": "burst"}
    (installed,) = await events_of(bus, EventType.CANARY_INSTALLED)
    data = installed.payload()
    assert isinstance(data, CanaryInstalled)
    assert data.lost() == ("east",)
    assert [(e.backend, e.state) for e in data.placement] == [
        ("burst", "Installing"),
        ("east", "Lost"),
        ("west", "Serving"),
    ]
