"""The projection of a shadow phase: Shadowing with the canary at 0 %, status.shadow at each
check, the verdict's figures kept through the rollback that names them, and any arrival
order folding to the stream order's."""

import random
from datetime import UTC, datetime, timedelta

from plnt_common.events import (
    CanaryInstalled,
    CanaryRef,
    Envelope,
    EventType,
    RouteRestored,
    RunReady,
    RunRequested,
    RunRolledBack,
    RunSnapshot,
    ShadowJudged,
    ShadowStarted,
    SmokeFigures,
    SmokeVerdict,
    new_event,
    saga_id,
)
from plnt_common.projection import RunProjection, apply_event, empty_projection
from plnt_common.resources import ShadowStatus, WorkflowRunSpec
from plnt_common.status import Phase, Reason

SPEC = WorkflowRunSpec.model_validate(
    {
        "workflow": {"ref": "wf@2.0.0", "registry": "file:///registry"},
        "backend": {"cluster": "local"},
        "canary": {"trafficPercent": 5, "shadow": {"percent": 20, "calls": 200}},
    }
)
SHADOW = SPEC.canary.shadow
assert SHADOW is not None
CANARY = CanaryRef(revision="2.0.0-g2", release="wf-g2", url="http://127.0.0.1:2")
START = datetime(2026, 12, 1, tzinfo=UTC)
REASON = "median similarity 0.71 < 0.85; stable vs stable 0.93"


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


def judged(seconds: int, kind: EventType, figures: ShadowStatus) -> Envelope:
    return at(seconds, kind, ShadowJudged(canary=CANARY, plan=SHADOW, figures=figures))


def until_shadowing() -> list[Envelope]:
    run = RunSnapshot(namespace="default", name="wf", generation=2, spec=SPEC)
    started = ShadowStarted(
        canary=CANARY, plan=SHADOW, noise_percent=5, figures=ShadowStatus(calls=200)
    )
    return [
        at(0, EventType.RUN_REQUESTED, RunRequested(run=run)),
        at(2, EventType.CANARY_INSTALLED, CanaryInstalled(run=run, canary=CANARY)),
        at(3, EventType.SMOKE_PASSED, SmokeVerdict(canary=CANARY, figures=SmokeFigures())),
        at(4, EventType.SHADOW_STARTED, started),
    ]


CHECKED = ShadowStatus(pairs=57, calls=200, similarity=0.9, reason="judging: 57 of 200 pairs")
FAILED = ShadowStatus(pairs=200, calls=200, similarity=0.71, noise_similarity=0.93, reason=REASON)


def failed_saga() -> list[Envelope]:
    restored = RouteRestored(
        revision=CANARY.revision,
        stable_revision="1.0.0-g1",
        reason=Reason.SHADOW_FAILED,
        message=f"shadow failed: {REASON}",
    )
    rolled_back = RunRolledBack(
        revision=CANARY.revision,
        stable_revision="1.0.0-g1",
        reason=Reason.SHADOW_FAILED,
        message=f"shadow failed: {REASON}",
    )
    return [
        *until_shadowing(),
        judged(10, EventType.SHADOW_CHECKED, CHECKED),
        judged(20, EventType.SHADOW_FAILED, FAILED),
        at(21, EventType.ROUTE_RESTORED, restored),
        at(22, EventType.RUN_ROLLED_BACK, rolled_back),
    ]


def fold(events: list[Envelope]) -> RunProjection:
    projection = empty_projection("default", "wf")
    for event in events:
        projection = apply_event(projection, event)
    return projection


def test_shadowing_shows_the_canary_at_0_percent_and_the_calls_waited_for() -> None:
    status = fold(until_shadowing()).status
    assert status.phase is Phase.SHADOWING
    assert (status.canary.revision, status.canary.traffic_percent) == (CANARY.revision, 0)
    assert status.shadow == ShadowStatus(calls=200)
    assert status.message == (
        "shadowing 2.0.0-g2: 20% of live calls mirrored, verdict after 200 pairs"
    )


def test_a_check_updates_the_figures_and_keeps_the_phase() -> None:
    status = fold([*until_shadowing(), judged(10, EventType.SHADOW_CHECKED, CHECKED)]).status
    assert (status.phase, status.shadow) == (Phase.SHADOWING, CHECKED)


def test_a_failed_shadow_ends_rolled_back_naming_the_figure_with_its_figures_kept() -> None:
    status = fold(failed_saga()).status
    assert status.phase is Phase.ROLLED_BACK
    assert status.shadow == FAILED
    assert status.message == (
        f"rolled back 2.0.0-g2: shadow failed: {REASON}; 1.0.0-g1 keeps serving"
    )


def test_a_passed_shadow_promotes() -> None:
    passed = FAILED.model_copy(update={"similarity": 0.95, "passed": True, "reason": "ok"})
    events = [
        *until_shadowing(),
        judged(10, EventType.SHADOW_PASSED, passed),
    ]
    assert fold(events).status.phase is Phase.PROMOTING
    ready = at(11, EventType.RUN_READY, RunReady(revision=CANARY.revision, endpoint="http://r"))
    status = fold([*events, ready]).status
    assert (status.phase, status.shadow) == (Phase.READY, passed)


def test_any_arrival_order_gives_the_projection_of_the_stream_order() -> None:
    events = failed_saga()
    expected = fold(events)
    shuffler = random.Random(7)
    for _ in range(200):
        order = events[:]
        shuffler.shuffle(order)
        assert fold(order) == expected, [e.event_type.value for e in order]


def test_a_new_saga_starts_without_shadow_figures() -> None:
    shadowed = fold(failed_saga())
    run = RunSnapshot(namespace="default", name="wf", generation=3, spec=SPEC)
    next_saga = new_event(
        EventType.RUN_REQUESTED,
        RunRequested(run=run),
        namespace="default",
        name="wf",
        sagaid=saga_id("default", "wf", 3),
        generation=3,
        source="test",
    )
    assert apply_event(shadowed, next_saga).status.shadow is None
