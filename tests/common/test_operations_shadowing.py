"""Operator requests while a run is Shadowing: abort and promote --full apply; a plain
promote is refused with the hint, as during the steps. A walk with copies still to
install refuses promote --full."""

from plnt_common.operations import Operation, refusal
from plnt_common.projection import RunProjection
from plnt_common.resources import PlacementEntry, WorkflowRunStatus
from plnt_common.status import Phase

SHADOWING = RunProjection(
    namespace="default", name="shop", status=WorkflowRunStatus(phase=Phase.SHADOWING)
)


def test_abort_applies_while_shadowing() -> None:
    assert refusal(Operation.ABORT, SHADOWING, name="shop") == ""


def test_promote_full_applies_while_shadowing_and_a_plain_promote_says_why_not() -> None:
    assert refusal(Operation.PROMOTE, SHADOWING, name="shop", full=True) == ""
    assert refusal(Operation.PROMOTE, SHADOWING, name="shop") == (
        "workflowrun/shop has nothing to promote: phase Shadowing "
        "(--full skips the remaining steps)"
    )


def test_promote_full_is_refused_while_a_walk_has_copies_to_install() -> None:
    placement = (
        PlacementEntry(backend="east", state="Installing"),
        PlacementEntry(
            backend="west", state="Installing", reason="walk 2/2: installed once east's steps pass"
        ),
    )
    walking = RunProjection(
        namespace="default",
        name="shop",
        status=WorkflowRunStatus(phase=Phase.PROGRESSING, placement=placement),
    )
    assert refusal(Operation.PROMOTE, walking, name="shop", full=True) == (
        "workflowrun/shop is walking its backends: west still to install, smoke-test and "
        "step; --full skips the remaining steps once every copy is installed (plnt abort "
        "rolls the canary back now)"
    )
    installed = walking.model_copy(
        update={"status": walking.status.model_copy(update={"placement": placement[:1]})}
    )
    assert refusal(Operation.PROMOTE, installed, name="shop", full=True) == ""
