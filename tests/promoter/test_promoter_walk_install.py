"""A walk that installs its copies in turn, as the promoter sees it: east's copy at its
last step, west's copy installed only then, routed at ``trafficPercent`` for its smoke
test and stepped after it; a failure to install west's copy takes the canary out of the
route before anything is removed; ``plnt promote --full`` waits for every copy."""

import asyncio
from collections.abc import AsyncIterator

import pytest
from held_kit import (
    CANARY,
    NS,
    STABLE,
    SetFigures,
    event,
    promoter,
    published,
    request,
    saga_of,
    spec,
    until,
)

from plnt_common.bus.bus import Bus
from plnt_common.bus.saga import advance_latest_saga
from plnt_common.events import (
    AnalysisVerdict,
    CanaryInstalled,
    CanaryRef,
    EventType,
    InstallFailed,
    RunSnapshot,
    SmokeFigures,
    SmokeVerdict,
    SpreadRelease,
)
from plnt_common.releases import release_name, spread_release_name
from plnt_common.resources import AnalysisStatus
from plnt_common.routes import RouteEntry, RouteTarget
from plnt_common.status import Reason
from plnt_promoter import logic
from plnt_promoter.adapters.route_table import RouteTable

WALK = ("east", "west")
RUN_SPEC = spec({"trafficPercent": 5, "steps": [50], "stepInterval": "1s"})
QUIET_S = 1.0
"""How long a request the promoter must ignore is given to show otherwise."""


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    opened = await Bus.open(nats_url, service="test")
    yield opened
    await opened.close()


def east_only(name: str) -> CanaryRef:
    return CanaryRef(
        revision=CANARY,
        release=release_name(NS, name, 2),
        url="http://127.0.0.1:2",
        backend="east",
        walk=WALK,
    )


def with_west(name: str) -> CanaryRef:
    west = SpreadRelease(
        backend="west", release=spread_release_name(NS, name, 2, "west"), url="http://127.0.0.1:3"
    )
    return east_only(name).model_copy(update={"spread": (west,)})


def snapshot(name: str) -> RunSnapshot:
    return RunSnapshot(namespace=NS, name=name, generation=2, spec=RUN_SPEC)


async def route(bus: Bus, name: str) -> RouteEntry:
    entry, _ = await RouteTable(bus.routes).get(namespace=NS, name=name)
    assert entry is not None
    return entry


async def east_at_its_last_step(bus: Bus, name: str) -> None:
    """The saga current, east's copy the route's canary at 50 %, west's not installed."""
    saga = saga_of(name)
    await advance_latest_saga(bus, NS, name, saga)
    stable = RouteTarget(revision=STABLE, url="http://127.0.0.1:1", saga_id=f"{NS}.{name}.1.1")
    canary = logic.copy_target(east_only(name), saga, "east")
    entry = RouteEntry(namespace=NS, name=name, stable=stable, canary=canary, canary_weight=50)
    await RouteTable(bus.routes).update(namespace=NS, name=name, change=lambda _: entry)
    installed = CanaryInstalled(run=snapshot(name), canary=east_only(name), backend="east")
    await bus.publish(event(name, EventType.CANARY_INSTALLED, installed))


async def test_the_next_copy_takes_the_share_for_its_smoke_test_then_its_steps(
    bus: Bus, nats_url: str
) -> None:
    name = "walk-next"
    async with published(bus) as seen, promoter(nats_url, SetFigures(), check_s=0.2):
        await east_at_its_last_step(bus, name)
        figures = AnalysisStatus(step="1/2 on east", passed=True, reason="40 calls")
        passed = AnalysisVerdict(
            canary=east_only(name),
            plan=RUN_SPEC.canary,
            step=1,
            traffic_percent=50,
            figures=figures,
            walk=WALK,
            backend="east",
        )
        await bus.publish(event(name, EventType.ANALYSIS_PASSED, passed), step="1")
        await asyncio.sleep(QUIET_S)
        # the installer installs west's copy: the promoter has east keep its weight
        held = await route(bus, name)
        assert held.canary is not None
        assert (held.canary.release, held.canary_weight) == (release_name(NS, name, 2), 50)
        assert not seen.of(name, EventType.CANARY_STEPPED)

        installed = CanaryInstalled(run=snapshot(name), canary=with_west(name), backend="west")
        await bus.publish(event(name, EventType.CANARY_INSTALLED, installed), step="west")
        west = spread_release_name(NS, name, 2, "west")

        async def west_routed() -> bool:
            entry = await route(bus, name)
            return entry.canary is not None and entry.canary.release == west

        await until(west_routed, timeout_s=5, what="west's copy in the route")
        assert (await route(bus, name)).canary_weight == 5  # trafficPercent, for its smoke test

        smoke = SmokeVerdict(
            canary=with_west(name), figures=SmokeFigures(passed=True), backend="west"
        )
        await bus.publish(event(name, EventType.SMOKE_PASSED, smoke), step="west")
        await until(
            lambda: seen.of(name, EventType.CANARY_STEPPED), timeout_s=5, what="west's step"
        )
    (stepped,) = seen.of(name, EventType.CANARY_STEPPED)
    assert (stepped.data["step"], stepped.data["backend"]) == (2, "west")
    after = await route(bus, name)
    assert after.canary is not None
    assert (after.canary.release, after.canary_weight) == (west, 50)
    assert not seen.of(name, EventType.RUN_READY)


async def test_a_later_copy_failing_to_install_takes_the_canary_out_of_the_route(
    bus: Bus, nats_url: str
) -> None:
    name = "walk-broken"
    failed = InstallFailed(
        reason=Reason.INSTALL_FAILED,
        message="PLNT_UNSET_KEY is not set",
        revision=CANARY,
        release=spread_release_name(NS, name, 2, "west"),
        backend="west",
    )
    async with published(bus) as seen, promoter(nats_url, SetFigures(), check_s=0.2):
        await east_at_its_last_step(bus, name)
        await bus.publish(event(name, EventType.INSTALL_FAILED, failed))
        await until(
            lambda: seen.of(name, EventType.ROUTE_RESTORED), timeout_s=5, what="the restore"
        )
    (restored,) = seen.of(name, EventType.ROUTE_RESTORED)
    assert restored.data["reason"] == "InstallFailed"
    assert restored.data["message"] == (
        "installing the canary on PlntBackend 'west': PLNT_UNSET_KEY is not set"
    )
    entry = await route(bus, name)
    assert entry.canary is None and entry.stable is not None and entry.stable.revision == STABLE


async def test_an_install_failure_before_any_canary_is_left_to_the_installer(
    bus: Bus, nats_url: str
) -> None:
    name = "never-installed"
    await advance_latest_saga(bus, NS, name, saga_of(name))
    failed = InstallFailed(
        reason=Reason.INSTALL_FAILED, message="no", revision=CANARY, release="r", backend="east"
    )
    async with published(bus) as seen, promoter(nats_url, SetFigures(), check_s=0.2):
        await bus.publish(event(name, EventType.INSTALL_FAILED, failed))
        await asyncio.sleep(QUIET_S)
    assert not seen.of(name, EventType.ROUTE_RESTORED)


async def test_promote_full_waits_while_a_copy_is_still_to_install(bus: Bus, nats_url: str) -> None:
    name = "walk-full"
    async with published(bus) as seen, promoter(nats_url, SetFigures(), check_s=0.2):
        await east_at_its_last_step(bus, name)
        await request(bus, name, EventType.PROMOTE_REQUESTED, full=True)
        await asyncio.sleep(QUIET_S)
    # promoting now would serve the revision on east alone and retire west's stable copy
    assert not seen.of(name, EventType.RUN_READY)
    entry = await route(bus, name)
    assert entry.stable is not None and entry.stable.revision == STABLE
    assert entry.canary_weight == 50
