"""A ``canary.installed`` delivered again after its saga moved on (a promoter killed
before its ack gets it back after the ack wait) writes no route: a stepped weight stays,
a promoted revision is not routed again as its own canary. A real nats-server and the
promoter's own consumer; the route bucket's revision counts every write."""

from collections.abc import AsyncIterator

import pytest
from held_kit import (
    CANARY,
    NS,
    SetFigures,
    canary_routed,
    promoter,
    saga_of,
    spec,
    until,
)
from nats.js.errors import NotFoundError

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.routes import RouteEntry, RouteTarget
from plnt_promoter.adapters.route_table import RouteTable
from plnt_promoter.step_hold import CHECK_S

STEPPED = spec({"steps": [10, 50], "stepInterval": "30s"})


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    opened = await Bus.open(nats_url, service="test")
    yield opened
    await opened.close()


async def settled(bus: Bus) -> None:
    """Every event the promoter took is acked: nothing pending, nothing in hand."""

    async def empty() -> bool:
        try:
            info = await bus.js.consumer_info(subjects.STREAM, subjects.durable_name("promoter"))
        except NotFoundError:  # the promoter has not made its consumer yet
            return False
        return info.num_ack_pending == 0 and info.num_pending == 0

    await until(empty, timeout_s=10, what="the promoter's consumer to ack everything")


async def test_an_install_delivered_again_after_a_step_keeps_the_steps_weight(
    bus: Bus, nats_url: str
) -> None:
    name, routes = "stepped-again", RouteTable(bus.routes)
    # the canary at step 2 (50 %) when its canary.installed comes back
    await canary_routed(bus, name, STEPPED, weight=50)
    before = await routes.get(namespace=NS, name=name)
    async with promoter(nats_url, SetFigures(), check_s=CHECK_S):
        await settled(bus)
    assert await routes.get(namespace=NS, name=name) == before


async def test_an_install_delivered_again_after_the_promotion_write_writes_no_route(
    bus: Bus, nats_url: str
) -> None:
    """The promoter killed after promoting the route, before ``run.ready``: the saga is
    still current when its ``canary.installed`` comes back."""
    name, routes = "promoted-again", RouteTable(bus.routes)
    await canary_routed(bus, name, spec({}), weight=10)
    promoted = RouteTarget(revision=CANARY, url="http://127.0.0.1:2", saga_id=saga_of(name))
    await routes.update(
        namespace=NS,
        name=name,
        change=lambda _: RouteEntry(namespace=NS, name=name, stable=promoted),
    )
    before = await routes.get(namespace=NS, name=name)
    async with promoter(nats_url, SetFigures(), check_s=CHECK_S):
        await settled(bus)
    assert await routes.get(namespace=NS, name=name) == before
