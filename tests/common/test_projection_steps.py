"""The projection of a stepped canary: Progressing with the step and weight, the judged
figures kept through a rollback, and any arrival order folding to the stream order's."""

import random
from datetime import UTC, datetime, timedelta

import pytest

from plnt_common.events import (
    AnalysisVerdict,
    CanaryInstalled,
    CanaryRef,
    CanaryStepped,
    Envelope,
    EventType,
    RouteRestored,
    RunReady,
    RunRequested,
    RunRolledBack,
    RunSnapshot,
    SmokeFigures,
    SmokeVerdict,
    new_event,
    saga_id,
)
from plnt_common.projection import RunProjection, apply_event, empty_projection
from plnt_common.resources import AnalysisStatus, RevisionFigures, WorkflowRunSpec
from plnt_common.status import Phase, Reason

SPEC = WorkflowRunSpec.model_validate(
    {
        "workflow": {"ref": "wf@2.0.0", "registry": "file:///registry"},
        "backend": {"cluster": "local"},
        "canary": {"trafficPercent": 5, "steps": [10, 50], "stepInterval": "2s"},
    }
)
PLAN = SPEC.canary
CANARY = CanaryRef(revision="2.0.0-g2", release="wf-g2", url="http://127.0.0.1:2")
START = datetime(2026, 12, 1, tzinfo=UTC)


def at(seconds: int, kind: EventType, data: object) -> Envelope:
    made = new_event(
        kind,
        data,  # type: ignore[arg-type]
        namespace="default",
        name="wf",
        sagaid=saga_id("default", "wf", 2),
        generation=2,
        source="test",
    )
    return made.model_copy(update={"time": START + timedelta(seconds=seconds)})


def judged(step: int, *, passed: bool, reason: str) -> AnalysisStatus:
    return AnalysisStatus(
        step=f"{step}/2",
        passed=passed,
        reason=reason,
        window_s=2.0,
        canary=RevisionFigures(invocations=40, error_percent=0 if passed else 25.0),
        stable=RevisionFigures(invocations=400),
    )


def stepped(seconds: int, step: int) -> Envelope:
    data = CanaryStepped(
        canary=CANARY,
        plan=PLAN,
        step=step,
        traffic_percent=PLAN.steps[step - 1],
        hold_s=4.0,
    )
    return at(seconds, EventType.CANARY_STEPPED, data)


def verdict(seconds: int, step: int, figures: AnalysisStatus) -> Envelope:
    kind = EventType.ANALYSIS_PASSED if figures.passed else EventType.ANALYSIS_FAILED
    data = AnalysisVerdict(
        canary=CANARY, plan=PLAN, step=step, traffic_percent=PLAN.steps[step - 1], figures=figures
    )
    return at(seconds, kind, data)


def opening() -> list[Envelope]:
    run = RunSnapshot(namespace="default", name="wf", generation=2, spec=SPEC)
    smoke = SmokeVerdict(canary=CANARY, figures=SmokeFigures(passed=True, reason="ok"))
    return [
        at(0, EventType.RUN_REQUESTED, RunRequested(run=run)),
        at(1, EventType.CANARY_INSTALLED, CanaryInstalled(run=run, canary=CANARY)),
        at(2, EventType.SMOKE_PASSED, smoke),
    ]


FIRST = judged(1, passed=True, reason="40 canary calls")


def promoted_saga() -> list[Envelope]:
    ready = RunReady(revision=CANARY.revision, endpoint="http://r/wf")
    return [
        *opening(),
        stepped(3, 1),
        verdict(5, 1, FIRST),
        stepped(6, 2),
        verdict(8, 2, judged(2, passed=True, reason="45 canary calls")),
        at(9, EventType.RUN_READY, ready),
    ]


FAILED = judged(1, passed=False, reason="canary errors 10 of 40 calls exceed maxErrorPercent 1")


def rolled_back_saga() -> list[Envelope]:
    message = f"step 1/2 analysis failed: {FAILED.reason}"
    restored = RouteRestored(
        revision=CANARY.revision,
        stable_revision="1.0.0-g1",
        reason=Reason.ANALYSIS_FAILED,
        message=message,
    )
    rolled_back = RunRolledBack(
        revision=CANARY.revision,
        stable_revision="1.0.0-g1",
        reason=Reason.ANALYSIS_FAILED,
        message=message,
    )
    return [
        *opening(),
        stepped(3, 1),
        verdict(4, 1, FAILED),
        at(5, EventType.ROUTE_RESTORED, restored),
        at(6, EventType.RUN_ROLLED_BACK, rolled_back),
    ]


def fold(events: list[Envelope]) -> RunProjection:
    projection = empty_projection("default", "wf")
    for event in events:
        projection = apply_event(projection, event)
    return projection


def test_a_held_step_reads_progressing_with_its_weight_step_and_hold() -> None:
    projection = fold(promoted_saga()[:4])
    assert projection.status.phase is Phase.PROGRESSING
    assert (projection.status.canary.traffic_percent, projection.status.canary.step) == (10, "1/2")
    assert projection.step_hold_s == 4.0
    assert projection.phase_since == START + timedelta(seconds=3)


def test_the_next_step_shows_the_last_judged_steps_figures_and_moves_the_phase_clock() -> None:
    projection = fold(promoted_saga()[:6])
    assert (projection.status.canary.traffic_percent, projection.status.canary.step) == (50, "2/2")
    assert projection.status.analysis == FIRST
    assert projection.phase_since == START + timedelta(seconds=6)


def test_the_last_steps_pass_reads_promoting_then_ready() -> None:
    events = promoted_saga()
    assert fold(events[:7]).status.phase is Phase.PROMOTING
    ready = fold(events)
    assert ready.status.phase is Phase.READY
    assert ready.status.analysis.step == "2/2"
    assert ready.status.canary.step == ""


def test_a_failed_step_rolls_back_keeping_its_figures_and_naming_the_figure() -> None:
    events = rolled_back_saga()
    assert fold(events[:5]).status.phase is Phase.ROLLING_BACK
    projection = fold(events)
    assert projection.status.phase is Phase.ROLLED_BACK
    assert projection.status.analysis == FAILED
    assert "maxErrorPercent 1" in projection.status.message
    assert projection.status.message.endswith("1.0.0-g1 keeps serving")


@pytest.mark.parametrize("saga", [promoted_saga, rolled_back_saga], ids=["ready", "rolled-back"])
def test_any_arrival_order_folds_to_the_stream_orders_projection(saga) -> None:  # type: ignore[no-untyped-def]
    events = saga()
    expected = fold(events)
    shuffler = random.Random(7)
    for _ in range(200):
        order = events[:]
        shuffler.shuffle(order)
        assert fold(order) == expected, [e.event_type.value for e in order]
