"""When a rollback still has a previous revision to go back to: kept at least the
shortest keepPreviousFor, retired at the very instant the window ends, and judged on the
phase alone when either time is unknown."""

from datetime import UTC, datetime, timedelta

import pytest

from plnt_common.operations import Operation, refusal
from plnt_common.projection import RunProjection
from plnt_common.resources import WorkflowRunStatus
from plnt_common.status import Phase

READY_SINCE = datetime(2026, 12, 1, 12, tzinfo=UTC)


def ready(*, since: datetime | None = READY_SINCE) -> RunProjection:
    return RunProjection(
        namespace="default",
        name="x",
        saga_id="default.x.2.1",
        generation=2,
        rank=5,
        previous_revision="1.0.0-g1",
        status=WorkflowRunStatus(phase=Phase.READY),
        phase_since=since,
    )


@pytest.mark.parametrize(
    ("since", "keep_s", "now"),
    [
        (READY_SINCE, 1.0, READY_SINCE + timedelta(seconds=0.5)),
        (READY_SINCE, 60.0, None),
        (None, 60.0, READY_SINCE + timedelta(hours=1)),
    ],
    ids=["the-shortest-keep", "no-clock", "no-phase-time"],
)
def test_a_rollback_applies_while_the_previous_revision_is_kept(
    since: datetime | None, keep_s: float, now: datetime | None
) -> None:
    projection = ready(since=since)
    assert refusal(Operation.ROLLBACK, projection, name="x", keep_previous_s=keep_s, now=now) == ""


def test_a_rollback_at_the_instant_keep_previous_for_ends_is_refused() -> None:
    retired = READY_SINCE + timedelta(seconds=60)
    refused = refusal(Operation.ROLLBACK, ready(), name="x", keep_previous_s=60.0, now=retired)
    assert refused == (
        "workflowrun/x has no previous revision kept to roll back to: 1.0.0-g1 was retired"
        " when keepPreviousFor ended at 2026-12-01T12:01:00+00:00"
    )
