"""Operator requests while a run is Shadowing: abort and promote --full apply; a plain
promote is refused with the hint, as during the steps."""

from plnt_common.operations import Operation, refusal
from plnt_common.projection import RunProjection
from plnt_common.resources import WorkflowRunStatus
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
