"""``status.traceId``: the trace the watcher folded a saga's opening event in, kept for that
saga, cleared by the next, and left out of the status document while there is none."""

import pytest
from pydantic import ValidationError
from test_projection import event, happy_saga, snapshot

from plnt_common.events import EventType, RunDeleted, RunRequested
from plnt_common.projection import ProjectionFold, apply_event, empty_projection
from plnt_common.resources import WorkflowRunStatus
from plnt_watcher.logic import status_document

SAGA_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
OTHER_TRACE = "0af7651916cd43dd8448eb211c80319c"
SAGA_PARENT = f"00-{SAGA_TRACE}-00f067aa0ba902b7-01"
OTHER_PARENT = f"00-{OTHER_TRACE}-b7ad6b7169203331-01"


def test_the_opening_events_trace_names_the_saga_and_later_traces_do_not_replace_it() -> None:
    requested, *rest = happy_saga()
    projection = apply_event(empty_projection("default", "wf"), requested, traceparent=SAGA_PARENT)
    assert projection.status.trace_id == SAGA_TRACE
    assert projection.saga_traceparent == SAGA_PARENT
    for later in rest:  # an operator's request or a deadline may start traces of their own
        projection = apply_event(projection, later, traceparent=OTHER_PARENT)
    assert projection.status.trace_id == SAGA_TRACE
    assert projection.saga_traceparent == SAGA_PARENT
    assert status_document(projection)["traceId"] == SAGA_TRACE


def test_a_new_saga_drops_the_previous_sagas_trace_and_the_deletion_saga_has_its_own() -> None:
    first = apply_event(empty_projection("default", "wf"), happy_saga()[0], traceparent=SAGA_PARENT)
    untraced = apply_event(
        first, event(EventType.RUN_REQUESTED, RunRequested(run=snapshot(2)), generation=2)
    )
    assert untraced.status.trace_id is None
    assert untraced.saga_traceparent == ""
    assert "traceId" not in status_document(untraced)
    deleting = apply_event(
        untraced,
        event(EventType.RUN_DELETED, RunDeleted(), generation=2, attempt=2),
        traceparent=OTHER_PARENT,
    )
    assert deleting.status.trace_id == OTHER_TRACE
    assert deleting.saga_traceparent == OTHER_PARENT


@pytest.mark.parametrize(
    "header",
    ["", "garbage", f"01-{SAGA_TRACE}-00f067aa0ba902b7-01", f"00-{'0' * 32}-00f067aa0ba902b7-01"],
)
def test_an_opening_event_without_a_valid_traceparent_names_no_trace(header: str) -> None:
    projection = apply_event(empty_projection("default", "wf"), happy_saga()[0], traceparent=header)
    assert projection.status.trace_id is None
    assert projection.saga_traceparent == ""


def test_replay_folds_the_same_trace_as_the_watcher() -> None:
    live = empty_projection("default", "wf")
    fold = ProjectionFold()
    for index, each in enumerate(happy_saga()):
        header = SAGA_PARENT if index == 0 else OTHER_PARENT
        live = apply_event(live, each, traceparent=header)
        fold.add(each, traceparent=header)
    assert fold.projections() == {"default.wf": live}
    assert live.status.trace_id == SAGA_TRACE


def test_without_tracing_the_status_document_has_no_trace_id() -> None:
    projection = empty_projection("default", "wf")
    for each in happy_saga():
        projection = apply_event(projection, each)
    assert "traceId" not in status_document(projection)


def test_a_trace_id_is_32_lowercase_hex_digits() -> None:
    with pytest.raises(ValidationError, match="traceId"):
        WorkflowRunStatus.model_validate({"traceId": "not-a-trace"})
