"""``status.placement`` folded from the saga: the canary's backend Installing beside where the
run serves, each backend passed over Skipped with its reason, the canary's backend Serving
once promoted, and the old placement back when the canary goes or a revert restores it."""

from test_projection import canary, event, fold, happy_saga, snapshot

from plnt_common.events import (
    CanaryInstalled,
    CapacityAwaited,
    EventType,
    RunReverted,
    RunRolledBack,
)
from plnt_common.projection import RunProjection
from plnt_common.resources import PlacementEntry
from plnt_common.status import Reason

FULL = PlacementEntry(backend="east", state="Skipped", reason="NoCapacity: no node has 2 free")


def placed_on(backend: str, generation: int = 1) -> list:  # type: ignore[type-arg]
    """The happy saga with its canary installed on ``backend``, ``east`` passed over."""
    saga = happy_saga(generation)
    installing = PlacementEntry(backend=backend, state="Installing", replicas=1)
    saga[2] = event(
        EventType.CANARY_INSTALLED,
        CanaryInstalled(
            run=snapshot(generation),
            canary=canary(generation),
            backend=backend,
            placement=(installing, FULL),
        ),
        generation=generation,
    )
    return saga


def states(projection: RunProjection) -> list[tuple[str, str]]:
    return [(e.backend, e.state) for e in projection.status.placement]


def test_the_canary_installs_then_serves_and_the_passed_over_backend_keeps_its_reason() -> None:
    saga = placed_on("west")
    installing = fold(saga[:3])
    assert states(installing) == [("west", "Installing"), ("east", "Skipped")]
    ready = fold(saga)
    assert states(ready) == [("west", "Serving"), ("east", "Skipped")]
    assert ready.status.placement[1].reason == FULL.reason


def test_a_canary_on_another_backend_installs_beside_the_serving_one_and_a_rollback_keeps_it() -> (
    None
):
    served = fold(placed_on("west"))
    second = placed_on("north", generation=2)
    during = fold(second[:3], served)
    assert states(during) == [("west", "Serving"), ("north", "Installing"), ("east", "Skipped")]
    rolled_back = event(
        EventType.RUN_ROLLED_BACK,
        RunRolledBack(revision="1.0.0-g2", reason=Reason.SMOKE_FAILED, message="slow"),
        generation=2,
    )
    after = fold([rolled_back], during)
    assert states(after) == [("west", "Serving")]


def test_a_promotion_moves_serving_and_a_revert_brings_the_old_placement_back() -> None:
    moved = fold(placed_on("north", generation=2), fold(placed_on("west")))
    assert states(moved) == [("north", "Serving"), ("east", "Skipped")]
    reverted = event(
        EventType.RUN_REVERTED,
        RunReverted(
            revision="1.0.0-g1", reverted_revision="1.0.0-g2", reason=Reason.ROLLBACK_REQUESTED
        ),
        generation=2,
        attempt=2,
    )
    assert states(fold([reverted], moved)) == [("west", "Serving")]


def test_pending_names_every_backend_without_room_and_keeps_where_it_serves() -> None:
    served = fold(placed_on("west"))
    second = placed_on("north", generation=2)
    awaited = event(
        EventType.CAPACITY_AWAITED,
        CapacityAwaited(
            backend="north",
            gpu_class="a100",
            needed=2,
            largest_free=1,
            message="PlntBackend 'north': no node has 2 free; PlntBackend 'east': no node has 2",
            placement=(
                PlacementEntry(backend="north", state="Skipped", reason="NoCapacity: full"),
                FULL,
            ),
        ),
        generation=2,
    )
    pending = fold([*second[:2], awaited], served)
    assert states(pending) == [("west", "Serving"), ("north", "Skipped"), ("east", "Skipped")]


def test_events_without_placement_leave_it_as_it_was() -> None:
    assert fold(happy_saga()).status.placement == ()
