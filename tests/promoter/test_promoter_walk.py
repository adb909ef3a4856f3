"""A stepped canary on several backends walks them one copy at a time: which backends,
which step is where, and the route moving only forward along the walk."""

from plnt_common.canary_walk import step_backend, step_label, step_weight, total_steps
from plnt_common.events import CanaryRef, SpreadRelease
from plnt_common.routes import RouteEntry, RouteTarget
from plnt_promoter import logic

SAGA = "default.wf.2.1"
CANARY = CanaryRef(
    revision="2.0.0-g2",
    release="default-wf-g2",
    url="http://east",
    backend="east",
    spread=(SpreadRelease(backend="west", release="default-wf-g2-west", url="http://west"),),
)
STABLE = RouteEntry(
    namespace="default",
    name="wf",
    stable=RouteTarget(revision="1.0.0-g1", url="http://east-g1", saga_id="default.wf.1.1"),
)
WALK = ["default-wf-g2", "default-wf-g2-west"]


def test_steps_are_numbered_across_the_walk_each_backend_in_turn() -> None:
    steps, walk = (10, 50), ("east", "west")
    assert total_steps(steps, walk) == 4
    assert [step_weight(steps, s) for s in range(1, 5)] == [10, 50, 10, 50]
    assert [step_backend(steps, walk, s) for s in range(1, 5)] == ["east", "east", "west", "west"]
    assert step_label(steps, walk, 3) == "3/4 on west"
    assert (total_steps(steps, ()), step_label(steps, (), 2), step_backend(steps, (), 2)) == (
        2,
        "2/2",
        "",
    )


def test_only_a_stepped_canary_on_several_backends_beside_a_stable_walks() -> None:
    assert logic.walk_of(CANARY, (10, 50), STABLE) == ("east", "west")
    assert logic.walk_of(CANARY, (), STABLE) == ()  # no steps: promoted after its smoke test
    assert logic.walk_of(CANARY, (10,), None) == ()  # a first rollout: nothing to judge beside
    one_copy = CANARY.model_copy(update={"spread": ()})
    assert logic.walk_of(one_copy, (10,), STABLE) == ()


def routed(backend: str, weight: int) -> RouteEntry:
    copy = logic.copy_target(CANARY, SAGA, backend)
    return STABLE.model_copy(update={"canary": copy, "canary_weight": weight})


def test_the_route_moves_forward_along_the_walk_and_never_back() -> None:
    west = logic.copy_target(CANARY, SAGA, "west")
    east = logic.copy_target(CANARY, SAGA, "east")
    assert (west.url, west.release, west.endpoints) == ("http://west", "default-wf-g2-west", [])

    moved = logic.walked_to(routed("east", 50), saga_id=SAGA, copy=west, weight=10, walk=WALK)
    assert moved is not None
    assert (moved.canary, moved.canary_weight) == (west, 10)  # the weight starts again
    # a redelivered step of east's, after the walk moved on: no write
    assert (
        logic.walked_to(routed("west", 10), saga_id=SAGA, copy=east, weight=50, walk=WALK) is None
    )
    # on one copy the weight only rises
    assert (
        logic.walked_to(routed("west", 50), saga_id=SAGA, copy=west, weight=10, walk=WALK) is None
    )
    risen = logic.walked_to(routed("west", 10), saga_id=SAGA, copy=west, weight=50, walk=WALK)
    assert risen is not None and risen.canary_weight == 50
    # another saga's canary is left alone
    other = logic.walked_to(
        routed("east", 10), saga_id="default.wf.3.1", copy=west, weight=50, walk=WALK
    )
    assert other is None


def test_promotion_after_a_walk_makes_every_copy_the_stable() -> None:
    entry = logic.with_every_copy(routed("west", 50), CANARY, SAGA)
    promoted = logic.promoted(entry, "http://router/workflows/wf/invoke")
    assert promoted.stable is not None
    assert [(e.backend, e.url) for e in promoted.stable.endpoints] == [
        ("east", "http://east"),
        ("west", "http://west"),
    ]
