"""The promoter's pure decisions for stepped delivery: when steps apply, which route write
a step makes, and whether a saga's canary is routed."""

import pytest

from plnt_common.routes import RouteEntry, RouteTarget
from plnt_promoter.logic import at_step_weight, canary_is_routed, steps_apply

SAGA = "default.shop.2.1"


def target(revision: str, saga_id: str) -> RouteTarget:
    return RouteTarget(revision=revision, url="http://127.0.0.1:1", saga_id=saga_id)


def route(*, stable: bool = True, canary_saga: str | None = SAGA, weight: int = 10) -> RouteEntry:
    return RouteEntry(
        namespace="default",
        name="shop",
        stable=target("1.0.0-g1", "default.shop.1.1") if stable else None,
        canary=target("1.1.0-g2", canary_saga) if canary_saga else None,
        canary_weight=weight,
    )


@pytest.mark.parametrize(
    ("steps", "entry", "applies"),
    [
        ((10, 50), route(), True),
        ((), route(), False),  # no steps: promoted after the smoke test
        ((10, 50), route(stable=False), False),  # a first rollout: nothing to judge beside
        ((10, 50), None, False),
    ],
    ids=["steps-and-stable", "no-steps", "first-rollout", "no-route"],
)
def test_steps_apply_only_with_steps_and_a_stable_revision(
    steps: tuple[int, ...], entry: RouteEntry | None, applies: bool
) -> None:
    assert steps_apply(steps, entry) is applies


def test_a_step_raises_this_sagas_canary_to_its_weight() -> None:
    stepped = at_step_weight(route(weight=10), saga_id=SAGA, weight=50)
    assert stepped is not None
    assert stepped.canary_weight == 50
    assert stepped.model_copy(update={"canary_weight": 10}) == route(weight=10)


@pytest.mark.parametrize(
    ("entry", "weight"),
    [
        (None, 50),
        (route(canary_saga=None), 50),
        (route(canary_saga="default.shop.3.1"), 50),  # another saga's canary
        (route(stable=False), 50),
        (route(weight=50), 50),  # a redelivered step: the weight is there already
        (route(weight=50), 10),  # an earlier step, late: weights only rise
    ],
    ids=["no-route", "no-canary", "another-saga", "no-stable", "same-weight", "lower-weight"],
)
def test_a_step_writes_nothing_when_the_route_is_not_this_sagas_or_already_there(
    entry: RouteEntry | None, weight: int
) -> None:
    assert at_step_weight(entry, saga_id=SAGA, weight=weight) is None


@pytest.mark.parametrize(
    ("entry", "routed"),
    [
        (route(), True),
        (route(canary_saga="default.shop.3.1"), False),
        (route(canary_saga=None), False),
        (None, False),
    ],
    ids=["this-saga", "another-saga", "no-canary", "no-route"],
)
def test_a_canary_is_routed_only_when_the_route_holds_this_sagas(
    entry: RouteEntry | None, routed: bool
) -> None:
    assert canary_is_routed(entry, SAGA) is routed
