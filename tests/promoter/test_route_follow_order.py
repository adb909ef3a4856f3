"""The route follower only moves a target forward: an observed record older than what the
target already reflects never marks it down.

The follower's two watches (observed releases, route entries) are not ordered with each
other. These tests hand it the deliveries in the racy order directly, against a real
nats-server holding the records as the bucket would, so the outcome does not depend on
timing: the route's revision and the follower's write counter say whether it wrote.
"""

from collections.abc import AsyncIterator

import pytest

from plnt_common.bus.bus import Bus
from plnt_common.metrics import SIDE_EFFECTS
from plnt_common.releases import ObservedRelease, ReleasePhase, observed_key, release_name
from plnt_common.routes import RouteEntry, RouteTarget, route_key
from plnt_common.status import ServingReason
from plnt_promoter.adapters.route_table import RouteTable
from plnt_promoter.route_follow import RouteFollower

NS, RUN, REVISION = "default", "shop", "1.0.0-g1"
RELEASE = release_name(NS, RUN, 1)
SAGA = "default.shop.1.1"
URL = "http://127.0.0.1:40001"
KEY = observed_key(NS, RELEASE)
ROUTE = route_key(NS, RUN)


def record(
    phase: ReleasePhase, *, namespace: str = NS, run: str = RUN, release: str = RELEASE
) -> ObservedRelease:
    url = URL if phase is ReleasePhase.READY else ""
    return ObservedRelease(
        namespace=namespace,
        release=release,
        run_name=run,
        revision=REVISION,
        saga_id=SAGA,
        phase=phase,
        url=url,
    )


def serving_canary(*, namespace: str = NS, run: str = RUN, release: str = RELEASE) -> RouteEntry:
    target = RouteTarget(revision=REVISION, url=URL, saga_id=SAGA, release=release)
    return RouteEntry(namespace=namespace, name=run, canary=target, canary_weight=5)


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    opened = await Bus.open(nats_url, service="test")
    yield opened
    await opened.close()


async def observe(bus: Bus, phase: ReleasePhase) -> int:
    return await bus.releases.put(KEY, record(phase).model_dump_json().encode())


async def route_now(bus: Bus) -> tuple[RouteEntry, int]:
    entry = await bus.routes.get(ROUTE)
    assert entry.value is not None
    return RouteEntry.model_validate_json(entry.value), entry.revision or 0


def follower_writes() -> float:
    return SIDE_EFFECTS.labels("promoter", "route_follow")._value.get()


async def test_a_saga_target_is_not_marked_down_by_a_starting_record_older_than_its_ready_one(
    bus: Bus,
) -> None:
    starting = await observe(bus, ReleasePhase.STARTING)
    await observe(bus, ReleasePhase.READY)  # the installer saw this before canary.installed
    written = await bus.routes.put(ROUTE, serving_canary().model_dump_json().encode())
    follower = RouteFollower(bus=bus, routes=RouteTable(bus.routes))
    writes = follower_writes()

    # the racy order: the Starting record reached this replica, its Ready one not yet
    await follower._on_observed(KEY, record(ReleasePhase.STARTING), starting)
    await follower._on_route(ROUTE, serving_canary(), written)

    entry, revision = await route_now(bus)
    assert revision == written, "the follower wrote the route"
    assert entry.canary is not None and entry.canary.serving
    assert follower_writes() == writes


async def test_a_starting_record_newer_than_the_target_marks_it_down(bus: Bus) -> None:
    ready = await observe(bus, ReleasePhase.READY)
    written = await bus.routes.put(ROUTE, serving_canary().model_dump_json().encode())
    follower = RouteFollower(bus=bus, routes=RouteTable(bus.routes))
    await follower._on_observed(KEY, record(ReleasePhase.READY), ready)
    await follower._on_route(ROUTE, serving_canary(), written)
    writes = follower_writes()

    restarted = await observe(bus, ReleasePhase.STARTING)  # the runner restarted since
    await follower._on_observed(KEY, record(ReleasePhase.STARTING), restarted)

    entry, revision = await route_now(bus)
    assert revision > written
    assert entry.canary is not None and not entry.canary.serving
    assert entry.canary.reason == ServingReason.RUNNER_STARTING
    assert follower_writes() == writes + 1


async def test_a_failed_record_newer_than_the_target_marks_it_down(bus: Bus) -> None:
    written = await bus.routes.put(ROUTE, serving_canary().model_dump_json().encode())
    follower = RouteFollower(bus=bus, routes=RouteTable(bus.routes))
    await follower._on_route(ROUTE, serving_canary(), written)

    failed = await observe(bus, ReleasePhase.FAILED)
    await follower._on_observed(KEY, record(ReleasePhase.FAILED), failed)

    entry, _ = await route_now(bus)
    assert entry.canary is not None and not entry.canary.serving
    assert entry.canary.reason == ServingReason.RUNNER_FAILED


async def test_a_record_older_than_the_one_held_is_not_taken(bus: Bus) -> None:
    starting = await observe(bus, ReleasePhase.STARTING)
    ready = await observe(bus, ReleasePhase.READY)
    follower = RouteFollower(bus=bus, routes=RouteTable(bus.routes))

    await follower._on_observed(KEY, record(ReleasePhase.READY), ready)
    await follower._on_observed(KEY, record(ReleasePhase.STARTING), starting)  # late delivery

    assert follower._observed[NS][RELEASE].phase is ReleasePhase.READY


async def test_a_record_of_a_hashed_release_name_moves_its_run_s_route(bus: Bus) -> None:
    # too long for Helm: the release name is cut and hashed, so only the record's
    # run_name leads back to the route
    namespace, run = "team-with-a-rather-long-namespace", "a-workflow-run-with-a-long-name"
    release = release_name(namespace, run, 1)
    assert not release.startswith(f"{namespace}-{run}")
    route = route_key(namespace, run)
    canary = serving_canary(namespace=namespace, run=run, release=release)
    written = await bus.routes.put(route, canary.model_dump_json().encode())
    follower = RouteFollower(bus=bus, routes=RouteTable(bus.routes))
    await follower._on_route(route, canary, written)

    failed = record(ReleasePhase.FAILED, namespace=namespace, run=run, release=release)
    key = observed_key(namespace, release)
    revision = await bus.releases.put(key, failed.model_dump_json().encode())
    await follower._on_observed(key, failed, revision)

    entry = RouteEntry.model_validate_json((await bus.routes.get(route)).value or b"")
    assert entry.canary is not None and not entry.canary.serving
    assert entry.canary.reason == ServingReason.RUNNER_FAILED
