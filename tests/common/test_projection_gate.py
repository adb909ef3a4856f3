"""The manual gate in the projection: Paused at the last step's weight (or after the smoke
test without steps), then Ready on promotion or RolledBack on an abort; any arrival order
folds to the stream order's."""

import random
from datetime import UTC, datetime, timedelta

import pytest
from test_projection_steps import at, fold

from plnt_common.events import (
    AnalysisVerdict,
    CanaryInstalled,
    CanaryRef,
    CanaryStepped,
    Envelope,
    EventType,
    OperatorRequest,
    RouteRestored,
    RunReady,
    RunRequested,
    RunRolledBack,
    RunSnapshot,
    SmokeFigures,
    SmokeVerdict,
)
from plnt_common.resources import AnalysisStatus, WorkflowRunSpec
from plnt_common.status import Phase, Reason

CANARY = CanaryRef(revision="2.0.0-g2", release="wf-g2", url="http://127.0.0.1:2")
START = datetime(2026, 12, 1, tzinfo=UTC)
GATE_MESSAGE = "waiting at the manual gate: plnt promote wf"


def spec(**canary: object) -> WorkflowRunSpec:
    return WorkflowRunSpec.model_validate(
        {
            "workflow": {"ref": "wf@2.0.0", "registry": "file:///registry"},
            "backend": {"cluster": "local"},
            "canary": {"trafficPercent": 5, "manualGate": True, **canary},
        }
    )


STEPPED = spec(steps=[10, 50], stepInterval="1s")
UNSTEPPED = spec()


def opening(run_spec: WorkflowRunSpec) -> list[Envelope]:
    run = RunSnapshot(namespace="default", name="wf", generation=2, spec=run_spec)
    smoke = SmokeVerdict(canary=CANARY, figures=SmokeFigures(passed=True, reason="ok"))
    return [
        at(0, EventType.RUN_REQUESTED, RunRequested(run=run)),
        at(1, EventType.CANARY_INSTALLED, CanaryInstalled(run=run, canary=CANARY)),
        at(2, EventType.SMOKE_PASSED, smoke),
    ]


def step(seconds: int, number: int) -> list[Envelope]:
    plan = STEPPED.canary
    weight = plan.steps[number - 1]
    figures = AnalysisStatus(step=f"{number}/2", passed=True, reason="ok")
    return [
        at(
            seconds,
            EventType.CANARY_STEPPED,
            CanaryStepped(canary=CANARY, plan=plan, step=number, traffic_percent=weight, hold_s=2),
        ),
        at(
            seconds + 1,
            EventType.ANALYSIS_PASSED,
            AnalysisVerdict(
                canary=CANARY, plan=plan, step=number, traffic_percent=weight, figures=figures
            ),
        ),
    ]


def paused_stepped() -> list[Envelope]:
    return [*opening(STEPPED), *step(3, 1), *step(5, 2)]


def promoted(events: list[Envelope], seconds: int) -> list[Envelope]:
    ready = RunReady(revision=CANARY.revision, endpoint="http://r/wf")
    return [
        *events,
        at(seconds, EventType.PROMOTE_REQUESTED, OperatorRequest(by="plnt.work/promote=now")),
        at(seconds + 1, EventType.RUN_READY, ready),
    ]


def aborted(events: list[Envelope], seconds: int) -> list[Envelope]:
    message = "aborted by the operator (plnt.work/abort=now)"
    restored = RouteRestored(
        revision=CANARY.revision, stable_revision="1.0.0-g1", reason=Reason.ABORTED, message=message
    )
    rolled_back = RunRolledBack(
        revision=CANARY.revision, stable_revision="1.0.0-g1", reason=Reason.ABORTED, message=message
    )
    return [
        *events,
        at(seconds, EventType.ABORT_REQUESTED, OperatorRequest(by="plnt.work/abort=now")),
        at(seconds + 1, EventType.ROUTE_RESTORED, restored),
        at(seconds + 2, EventType.RUN_ROLLED_BACK, rolled_back),
    ]


def test_the_last_steps_pass_waits_paused_at_the_last_steps_weight() -> None:
    projection = fold(paused_stepped())
    assert projection.status.phase is Phase.PAUSED
    assert projection.status.message == GATE_MESSAGE
    assert (projection.status.canary.traffic_percent, projection.status.canary.step) == (50, "2/2")
    assert projection.saga_active
    assert projection.phase_since == START + timedelta(seconds=6)


def test_with_steps_the_smoke_test_and_an_earlier_step_do_not_pause() -> None:
    assert fold(paused_stepped()[:3]).status.phase is Phase.PROMOTING  # the steps come next
    assert fold(paused_stepped()[:5]).status.phase is Phase.PROGRESSING


def test_without_steps_a_passed_smoke_test_waits_paused() -> None:
    projection = fold(opening(UNSTEPPED))
    assert projection.status.phase is Phase.PAUSED
    assert projection.status.message == GATE_MESSAGE
    assert projection.status.canary.traffic_percent == 5


def test_without_the_gate_a_passed_smoke_test_reads_promoting() -> None:
    projection = fold(opening(spec(manualGate=False)))
    assert projection.status.phase is Phase.PROMOTING


def test_a_promote_request_alone_changes_nothing_then_ready() -> None:
    paused = fold(paused_stepped())
    events = promoted(paused_stepped(), 8)
    assert fold(events[:-1]).status == paused.status
    assert fold(events).status.phase is Phase.READY


def test_an_abort_while_paused_ends_rolled_back_naming_the_abort() -> None:
    projection = fold(aborted(paused_stepped(), 8))
    assert projection.status.phase is Phase.ROLLED_BACK
    assert "aborted by the operator (plnt.work/abort=now)" in projection.status.message
    assert projection.status.conditions[-1].reason == Reason.ABORTED


@pytest.mark.parametrize(
    "saga",
    [
        paused_stepped,
        lambda: opening(UNSTEPPED),
        lambda: promoted(opening(UNSTEPPED), 3),
        lambda: aborted(paused_stepped(), 8),
    ],
    ids=["paused", "paused-unstepped", "promoted-unstepped", "aborted"],
)
def test_any_arrival_order_folds_to_the_stream_orders_projection(saga) -> None:  # type: ignore[no-untyped-def]
    events = saga()
    expected = fold(events)
    shuffler = random.Random(5)
    for _ in range(200):
        order = events[:]
        shuffler.shuffle(order)
        assert fold(order) == expected, [e.event_type.value for e in order]


def test_ready_remembers_the_revision_its_promotion_replaced() -> None:
    run = RunSnapshot(namespace="default", name="wf", generation=2, spec=UNSTEPPED)
    ready = RunReady(revision="2.0.0-g2", endpoint="http://r", previous_revision="1.0.0-g1")
    projection = fold(
        [
            at(0, EventType.RUN_REQUESTED, RunRequested(run=run)),
            at(1, EventType.RUN_READY, ready),
        ]
    )
    assert projection.previous_revision == "1.0.0-g1"
    first = RunReady(revision="2.0.0-g2", endpoint="http://r")
    assert (
        fold(
            [
                at(0, EventType.RUN_REQUESTED, RunRequested(run=run)),
                at(1, EventType.RUN_READY, first),
            ]
        ).previous_revision
        == ""
    )
