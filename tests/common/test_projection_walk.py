"""The projection of a walked rollout: each backend's copy installed, smoke-tested and
stepped in turn, the phase saying which, and any arrival order folding to the stream's."""

import random
from datetime import timedelta

import pytest
from test_projection_steps import START, at, fold

from plnt_common.events import (
    AnalysisVerdict,
    CanaryInstalled,
    CanaryRef,
    CanaryStepped,
    Envelope,
    EventType,
    InstallFailed,
    RouteRestored,
    RunReady,
    RunRequested,
    RunRolledBack,
    RunSnapshot,
    SmokeFigures,
    SmokeVerdict,
    SpreadRelease,
    new_event,
    saga_id,
)
from plnt_common.projection import ProjectionFold
from plnt_common.resources import AnalysisStatus, PlacementEntry
from plnt_common.status import Phase, Reason
from plnt_testkit.events import WALKED_RUN as RUN
from plnt_testkit.events import WALKED_SPEC as SPEC

WALK = ("east", "west")
EAST = CanaryRef(revision="2.0.0-g2", release="wf-g2", url="http://east", backend="east", walk=WALK)
WEST = SpreadRelease(backend="west", release="wf-g2-west", url="http://west")
BOTH = EAST.model_copy(update={"spread": (WEST,)})
WAITING = PlacementEntry(
    backend="west", state="Installing", reason="walk 2/2: installed once east's steps pass"
)
PASSED = AnalysisStatus(step="1/2 on east", passed=True, reason="40 canary calls")


def installed(seconds: int, canary: CanaryRef, backend: str) -> Envelope:
    entries = (
        PlacementEntry(backend="east", state="Installing"),
        WAITING if backend == "east" else WAITING.model_copy(update={"reason": ""}),
    )
    data = CanaryInstalled(run=RUN, canary=canary, backend=backend, placement=entries)
    return at(seconds, EventType.CANARY_INSTALLED, data)


def smoked(seconds: int, canary: CanaryRef, backend: str) -> Envelope:
    figures = SmokeFigures(passed=True, reason=f"ok on {backend}")
    return at(
        seconds,
        EventType.SMOKE_PASSED,
        SmokeVerdict(canary=canary, figures=figures, backend=backend),
    )


def step(seconds: int, canary: CanaryRef, number: int) -> list[Envelope]:
    """canary.stepped at ``seconds``, analysis.passed a second later."""
    backend = WALK[number - 1]
    held = CanaryStepped(
        canary=canary,
        plan=SPEC.canary,
        step=number,
        traffic_percent=50,
        hold_s=4.0,
        walk=WALK,
        backend=backend,
    )
    figures = PASSED.model_copy(update={"step": f"{number}/2 on {backend}"})
    passed = AnalysisVerdict(
        canary=canary,
        plan=SPEC.canary,
        step=number,
        traffic_percent=50,
        figures=figures,
        walk=WALK,
        backend=backend,
    )
    return [
        at(seconds, EventType.CANARY_STEPPED, held),
        at(seconds + 1, EventType.ANALYSIS_PASSED, passed),
    ]


def walked_saga() -> list[Envelope]:
    ready = RunReady(revision=EAST.revision, endpoint="http://r/wf")
    return [
        at(0, EventType.RUN_REQUESTED, RunRequested(run=RUN)),
        installed(1, EAST, "east"),
        smoked(2, EAST, "east"),
        *step(3, EAST, 1),
        installed(10, BOTH, "west"),
        smoked(11, BOTH, "west"),
        *step(12, BOTH, 2),
        at(14, EventType.RUN_READY, ready),
    ]


def failed_saga() -> list[Envelope]:
    message = "installing the canary on PlntBackend 'west': the key is not set"
    failed = InstallFailed(
        reason=Reason.INSTALL_FAILED,
        message="the key is not set",
        revision=EAST.revision,
        release=WEST.release,
        backend="west",
    )
    restored = RouteRestored(
        revision=EAST.revision,
        stable_revision="1.0.0-g1",
        reason=Reason.INSTALL_FAILED,
        message=message,
    )
    rolled_back = RunRolledBack(
        revision=EAST.revision,
        stable_revision="1.0.0-g1",
        reason=Reason.INSTALL_FAILED,
        message=message,
    )
    return [
        *walked_saga()[:5],
        at(9, EventType.INSTALL_FAILED, failed),
        at(10, EventType.ROUTE_RESTORED, restored),
        at(11, EventType.RUN_ROLLED_BACK, rolled_back),
    ]


def test_the_first_backends_copy_is_smoke_tested_while_the_next_waits_its_turn() -> None:
    status = fold(walked_saga()[:2]).status
    assert (status.phase, status.message) == (
        Phase.SMOKING,
        "smoke-testing canary 2.0.0-g2 on east",
    )
    assert status.placement[1] == WAITING


def test_a_backends_last_step_passing_reads_installing_the_next_copy() -> None:
    projection = fold(walked_saga()[:5])
    assert projection.status.phase is Phase.INSTALLING
    assert projection.status.message == (
        "step 1/2 on east passed: 40 canary calls; installing canary 2.0.0-g2 on west"
    )
    assert projection.phase_since == START + timedelta(seconds=4)  # the Installing deadline's


def test_the_next_copy_is_smoke_tested_then_its_steps_resume() -> None:
    events = walked_saga()
    smoking = fold(events[:6]).status
    assert (smoking.phase, smoking.message) == (
        Phase.SMOKING,
        "smoke-testing canary 2.0.0-g2 on west",
    )
    assert smoking.placement[1].reason == ""
    assert fold(events[:7]).status.phase is Phase.PROGRESSING  # not Promoting: steps remain
    assert fold(events[:8]).status.canary.step == "2/2 on west"


def test_the_walk_ends_ready_with_every_copy_serving() -> None:
    status = fold(walked_saga()).status
    assert status.phase is Phase.READY
    assert [(e.backend, e.state, e.reason) for e in status.placement] == [
        ("east", "Serving", ""),
        ("west", "Serving", ""),
    ]


def test_the_next_copy_failing_to_install_rolls_back_after_steps_passed() -> None:
    events = failed_saga()
    assert fold(events[:6]).status.phase is Phase.ROLLING_BACK
    status = fold(events).status
    assert status.phase is Phase.ROLLED_BACK
    assert "PlntBackend 'west'" in status.message


@pytest.mark.parametrize("saga", [walked_saga, failed_saga], ids=["ready", "rolled-back"])
def test_any_arrival_order_folds_to_the_stream_orders_projection(saga) -> None:  # type: ignore[no-untyped-def]
    events = saga()
    expected = fold(events)
    shuffler = random.Random(11)
    for _ in range(200):
        order = events[:]
        shuffler.shuffle(order)
        assert fold(order) == expected, [e.event_type.value for e in order]


def test_replay_folds_a_promoted_walk_and_the_next_saga_as_the_watcher_does() -> None:
    """Replay builds once for many events: the placement the promoted saga derives must
    be kept when the next saga opens, as the watcher's event-by-event fold keeps it."""
    following = RunSnapshot(namespace="default", name="wf", generation=3, spec=SPEC)
    opening = new_event(
        EventType.RUN_REQUESTED,
        RunRequested(run=following),
        namespace="default",
        name="wf",
        sagaid=saga_id("default", "wf", 3),
        generation=3,
        source="test",
    )
    events = [*walked_saga(), opening]
    replay = ProjectionFold()
    for event in events:
        replay.add(event)
    (replayed,) = replay.projections().values()
    assert replayed == fold(events)
    assert [(e.backend, e.state) for e in replayed.serving_before_saga] == [
        ("east", "Serving"),
        ("west", "Serving"),
    ]
