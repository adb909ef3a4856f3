"""Which operator requests apply in which phase (the CLI and the watcher both ask), what an
annotation asks for, and that the manual gate has no deadline."""

from datetime import UTC, datetime, timedelta

import pytest

from plnt_common.operations import Operation, refusal, requested
from plnt_common.projection import RunProjection
from plnt_common.resources import WorkflowRunStatus
from plnt_common.status import Phase
from plnt_watcher.logic import overdue_phase
from plnt_watcher.requests import dedupe_key, keep_previous_s

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)


def at(phase: Phase, *, deleting: bool = False, previous: str = "1.0.0-g1") -> RunProjection:
    return RunProjection(
        namespace="default",
        name="x",
        saga_id="default.x.2.1",
        generation=2,
        rank=5,
        deleting=deleting,
        previous_revision=previous,
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
    keep = 6 * 3600.0 if keeps else 0.0  # the run has been in its phase for 5 h
    reason = refusal(operation, at(phase), name="x", full=full, keep_previous_s=keep, now=NOW)
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
    assert keep_previous_s({"spec": {"rollback": {"keepPreviousFor": "10m"}}}) == 600
    assert keep_previous_s({"spec": {}}) == 0
    assert keep_previous_s({"spec": {"rollback": {"keepPreviousFor": "soon"}}}) == 0


def test_a_rollback_needs_a_replaced_revision_still_inside_its_window() -> None:
    first = at(Phase.READY, previous="")
    assert refusal(Operation.ROLLBACK, first, name="x", keep_previous_s=6 * 3600, now=NOW) == (
        "workflowrun/x has no previous revision kept to roll back to: its first rollout"
        " replaced none"
    )
    ready = at(Phase.READY)  # Ready for 5 h
    assert refusal(Operation.ROLLBACK, ready, name="x", keep_previous_s=4 * 3600, now=NOW) == (
        "workflowrun/x has no previous revision kept to roll back to: 1.0.0-g1 was retired"
        " when keepPreviousFor ended at 2026-12-01T11:00:00+00:00"
    )
    inside = NOW - timedelta(hours=1, seconds=1)
    assert refusal(Operation.ROLLBACK, ready, name="x", keep_previous_s=4 * 3600, now=inside) == ""


def test_a_paused_run_never_times_out_even_with_a_deadline_set() -> None:
    deadlines = {phase.value: 1.0 for phase in Phase}
    assert overdue_phase(at(Phase.PAUSED), now=NOW, deadlines=deadlines) is None
    assert overdue_phase(at(Phase.PROGRESSING), now=NOW, deadlines=deadlines) is not None


def test_a_shadow_phase_is_overdue_only_past_its_max_duration_plus_the_margin() -> None:
    deadlines = {Phase.SHADOWING.value: 120.0}
    shadowing = at(Phase.SHADOWING).model_copy(
        update={"step_hold_s": 600.0, "phase_since": NOW - timedelta(seconds=700)}
    )
    assert overdue_phase(shadowing, now=NOW, deadlines=deadlines) is None
    late = shadowing.model_copy(update={"phase_since": NOW - timedelta(seconds=721)})
    assert overdue_phase(late, now=NOW, deadlines=deadlines) == ("Shadowing", 720.0)
