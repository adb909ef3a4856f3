"""Which operator requests apply in which phase (the CLI and the watcher both ask), what an
annotation asks for, and that the manual gate has no deadline."""

from datetime import UTC, datetime, timedelta

import pytest

from plnt_common.operations import Operation, refusal, requested
from plnt_common.projection import RunProjection
from plnt_common.resources import WorkflowRunStatus
from plnt_common.status import Phase
from plnt_watcher.logic import overdue_phase
from plnt_watcher.requests import dedupe_key, keeps_previous

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)


def at(phase: Phase, *, deleting: bool = False) -> RunProjection:
    return RunProjection(
        namespace="default",
        name="x",
        saga_id="default.x.2.1",
        generation=2,
        rank=5,
        deleting=deleting,
        status=WorkflowRunStatus(phase=phase),
        phase_since=NOW - timedelta(hours=5),
    )


@pytest.mark.parametrize(
    ("operation", "phase", "full", "keeps", "applies"),
    [
        (Operation.PROMOTE, Phase.PAUSED, False, False, True),
        (Operation.PROMOTE, Phase.PAUSED, True, False, True),
        (Operation.PROMOTE, Phase.PROGRESSING, True, False, True),
        (Operation.PROMOTE, Phase.PROGRESSING, False, False, False),
        (Operation.PROMOTE, Phase.SMOKING, True, False, False),
        (Operation.PROMOTE, Phase.READY, False, False, False),
        (Operation.ABORT, Phase.SMOKING, False, False, True),
        (Operation.ABORT, Phase.PROGRESSING, False, False, True),
        (Operation.ABORT, Phase.PAUSED, False, False, True),
        (Operation.ABORT, Phase.PROMOTING, False, False, False),
        (Operation.ABORT, Phase.READY, False, False, False),
        (Operation.ABORT, Phase.INSTALLING, False, False, False),
        (Operation.ROLLBACK, Phase.READY, False, True, True),
        (Operation.ROLLBACK, Phase.READY, False, False, False),
        (Operation.ROLLBACK, Phase.PAUSED, False, True, False),
    ],
)
def test_each_request_applies_only_where_it_has_something_to_do(
    operation: Operation, phase: Phase, full: bool, keeps: bool, applies: bool
) -> None:
    reason = refusal(operation, at(phase), name="x", full=full, keeps_previous=keeps)
    assert (reason == "") is applies, reason


def test_refusals_read_as_one_line_naming_the_run_and_the_phase() -> None:
    ready = at(Phase.READY)
    assert refusal(Operation.PROMOTE, ready, name="x") == (
        "workflowrun/x has nothing to promote: phase Ready"
    )
    assert (
        refusal(Operation.ABORT, ready, name="x")
        == "workflowrun/x has nothing to abort: phase Ready"
    )
    assert refusal(Operation.ROLLBACK, ready, name="x") == (
        "workflowrun/x has no previous revision kept to roll back to"
    )
    assert refusal(Operation.PROMOTE, at(Phase.PROGRESSING), name="x") == (
        "workflowrun/x has nothing to promote: phase Progressing (--full skips the remaining steps)"
    )


def test_a_run_being_deleted_or_never_folded_has_nothing_to_do() -> None:
    assert refusal(Operation.ABORT, at(Phase.PAUSED, deleting=True), name="x") == (
        "workflowrun/x has nothing to abort: phase Deleting"
    )
    assert refusal(Operation.PROMOTE, None, name="x") == (
        "workflowrun/x has nothing to promote: phase Pending"
    )


def test_annotations_name_the_operations_they_ask_for() -> None:
    annotations = {
        "plnt.work/abort": "2026-12-01T12:00:00Z",
        "plnt.work/promote": "full",
        "other.example/promote": "no",
    }
    assert requested(annotations) == [
        (Operation.PROMOTE, "full"),
        (Operation.ABORT, "2026-12-01T12:00:00Z"),
    ]
    assert requested(None) == []
    assert requested({"plnt.work/pause": "x"}) == []


def test_the_same_annotation_value_is_one_request() -> None:
    assert dedupe_key("2026-12-01T12:00:00Z") == dedupe_key("2026-12-01T12:00:00Z")
    assert dedupe_key("2026-12-01T12:00:00Z") != dedupe_key("2026-12-01T12:00:01Z")


def test_keep_previous_for_is_read_from_the_spec() -> None:
    assert keeps_previous({"spec": {"rollback": {"keepPreviousFor": "10m"}}})
    assert not keeps_previous({"spec": {}})
    assert not keeps_previous({"spec": {"rollback": {"keepPreviousFor": "soon"}}})


def test_a_paused_run_never_times_out_even_with_a_deadline_set() -> None:
    deadlines = {phase.value: 1.0 for phase in Phase}
    assert overdue_phase(at(Phase.PAUSED), now=NOW, deadlines=deadlines) is None
    assert overdue_phase(at(Phase.PROGRESSING), now=NOW, deadlines=deadlines) is not None
