"""The projection fold: phases per event, stale and duplicate events, order tolerance."""

import random
from datetime import UTC, datetime, timedelta

import pytest

from plnt_common.events import (
    AnalysisVerdict,
    BackendAwaited,
    CanaryInstalled,
    CanaryRef,
    CanaryStepped,
    CapacityAwaited,
    Envelope,
    EventType,
    InstallFailed,
    OperatorRequest,
    RouteRestored,
    RunDeleted,
    RunFailed,
    RunReady,
    RunRemoved,
    RunRequested,
    RunReverted,
    RunRolledBack,
    RunSnapshot,
    ShadowJudged,
    ShadowStarted,
    SmokeFigures,
    SmokeVerdict,
    SpecPulled,
    StepTimedOut,
    new_event,
    saga_id,
)
from plnt_common.golden import GoldenResult
from plnt_common.projection import (
    OPENING_EVENTS,
    STEP_RANK,
    ProjectionFold,
    RunProjection,
    apply_event,
    empty_projection,
    run_key,
    saga_order,
)
from plnt_common.resources import (
    AnalysisStatus,
    Canary,
    CanaryStatus,
    PlntBackendSpec,
    Shadow,
    ShadowStatus,
    SmokeStatus,
    WorkflowRunSpec,
)
from plnt_common.status import Phase, Reason

SPEC = WorkflowRunSpec.model_validate(
    {
        "workflow": {"ref": "wf@1.0.0", "registry": "file:///registry"},
        "backend": {"cluster": "local"},
        "canary": {"trafficPercent": 7},
    }
)


def event(kind: EventType, data: object, *, generation: int = 1, attempt: int = 1) -> Envelope:
    return new_event(
        kind,
        data,  # type: ignore[arg-type]
        namespace="default",
        name="wf",
        sagaid=saga_id("default", "wf", generation, attempt),
        generation=generation,
        source="test",
    )


def snapshot(generation: int = 1) -> RunSnapshot:
    return RunSnapshot(namespace="default", name="wf", generation=generation, spec=SPEC)


def canary(generation: int = 1) -> CanaryRef:
    return CanaryRef(
        revision=f"1.0.0-g{generation}", release=f"wf-g{generation}", url="http://127.0.0.1:1"
    )


def happy_saga(generation: int = 1) -> list[Envelope]:
    return [
        event(
            EventType.RUN_REQUESTED, RunRequested(run=snapshot(generation)), generation=generation
        ),
        event(
            EventType.SPEC_PULLED,
            SpecPulled(
                run=snapshot(generation),
                spec_digest="sha256:" + "a" * 64,
                workflow_name="wf",
                workflow_version="1.0.0",
                revision=f"1.0.0-g{generation}",
                backend_name="local",
                backend=PlntBackendSpec(type="local"),
            ),
            generation=generation,
        ),
        event(
            EventType.CANARY_INSTALLED,
            CanaryInstalled(run=snapshot(generation), canary=canary(generation)),
            generation=generation,
        ),
        event(
            EventType.SMOKE_PASSED,
            SmokeVerdict(
                canary=canary(generation), figures=SmokeFigures(passed=True, invocations=3)
            ),
            generation=generation,
        ),
        event(
            EventType.RUN_READY,
            RunReady(revision=f"1.0.0-g{generation}", endpoint="http://router/workflows/wf/invoke"),
            generation=generation,
        ),
    ]


def fold(events: list[Envelope], start: RunProjection | None = None) -> RunProjection:
    projection = start or empty_projection("default", "wf")
    for item in events:
        projection = apply_event(projection, item)
    return projection


def test_a_happy_saga_walks_the_phases_and_fills_the_status() -> None:
    phases = []
    projection = empty_projection("default", "wf")
    for item in happy_saga():
        projection = apply_event(projection, item)
        phases.append(projection.status.phase)
    assert phases == [Phase.PULLING, Phase.INSTALLING, Phase.SMOKING, Phase.PROMOTING, Phase.READY]
    status = projection.status
    assert status.revision == "1.0.0-g1"
    assert status.endpoint == "http://router/workflows/wf/invoke"
    assert status.spec_digest.startswith("sha256:")
    assert {c.type.value: c.status for c in status.conditions} == {
        "SpecPulled": "True",
        "CanaryInstalled": "True",
        "SmokePassed": "True",
        "Promoted": "True",
        "Ready": "True",
    }


def test_the_canary_share_is_reported_while_smoking() -> None:
    projection = fold(happy_saga()[:3])
    assert projection.status.canary.traffic_percent == 7
    assert projection.status.canary.revision == "1.0.0-g1"


def test_applying_an_event_twice_changes_nothing() -> None:
    events = happy_saga()
    once = fold(events)
    twice = fold(events + events)
    assert once == twice


def test_an_event_of_an_older_saga_changes_nothing() -> None:
    newer = fold(happy_saga(generation=2)[:2])
    late = happy_saga(generation=1)[3]
    assert apply_event(newer, late) == newer


def test_a_stale_step_within_the_saga_does_not_move_the_phase_back() -> None:
    events = happy_saga()
    projection = fold(events[:4])
    assert apply_event(projection, events[2]).status.phase is Phase.PROMOTING


def test_a_second_terminal_event_is_ignored() -> None:
    projection = fold(happy_saga())
    failed = event(EventType.RUN_FAILED, RunFailed(reason=Reason.SPEC_INVALID, message="late"))
    assert apply_event(projection, failed) == projection


def test_a_rollback_keeps_the_promoted_revision() -> None:
    projection = fold(happy_saga(generation=1))
    second = happy_saga(generation=2)[:3]
    rolled_back = event(
        EventType.RUN_ROLLED_BACK,
        RunRolledBack(
            revision="2.0.0-g2",
            stable_revision="1.0.0-g1",
            reason=Reason.SMOKE_FAILED,
            message="errors",
        ),
        generation=2,
    )
    projection = fold([*second, rolled_back], projection)
    assert projection.status.phase is Phase.ROLLED_BACK
    assert projection.status.revision == "1.0.0-g1"
    assert projection.status.observed_generation == 2
    assert "1.0.0-g1 keeps serving" in projection.status.message


def test_deletion_then_removal_marks_the_projection_removed() -> None:
    projection = fold(happy_saga())
    deleted = event(EventType.RUN_DELETED, RunDeleted(), attempt=2)
    removed = event(EventType.RUN_REMOVED, RunRemoved(), attempt=2)
    projection = fold([deleted, removed], projection)
    assert projection.deleting and projection.removed
    assert projection.status.phase is Phase.DELETING


@pytest.mark.parametrize(
    ("sagaid", "order"),
    [("default.wf.1.1", (1, 1)), ("ns.a.b.12.3", (12, 3))],
    ids=["plain", "dotted-name-prefix"],
)
def test_saga_order_reads_generation_and_attempt(sagaid: str, order: tuple[int, int]) -> None:
    assert saga_order(sagaid) == order


def rolled_back_saga() -> list[Envelope]:
    requested, pulled, installed, _, _ = happy_saga(generation=2)
    failed = event(
        EventType.SMOKE_FAILED,
        SmokeVerdict(canary=canary(2), figures=SmokeFigures(passed=False, reason="errors")),
        generation=2,
    )
    timed_out = event(
        EventType.STEP_TIMED_OUT, StepTimedOut(phase="Smoking", deadline_s=5), generation=2
    )
    restored = event(
        EventType.ROUTE_RESTORED,
        RouteRestored(revision="1.0.0-g2", stable_revision="1.0.0-g1", reason=Reason.SMOKE_FAILED),
        generation=2,
    )
    rolled_back = event(
        EventType.RUN_ROLLED_BACK,
        RunRolledBack(revision="1.0.0-g2", stable_revision="1.0.0-g1", reason=Reason.SMOKE_FAILED),
        generation=2,
    )
    return [requested, pulled, installed, failed, timed_out, restored, rolled_back]


@pytest.mark.parametrize("saga", [happy_saga, rolled_back_saga], ids=["ready", "rolled-back"])
def test_any_arrival_order_gives_the_projection_of_the_stream_order(saga) -> None:  # type: ignore[no-untyped-def]
    events = saga()
    start = fold(happy_saga(generation=1)) if saga is rolled_back_saga else None
    expected = fold(events, start)
    shuffler = random.Random(11)
    for _ in range(200):
        order = events[:]
        shuffler.shuffle(order)
        assert fold(order, start) == expected, [e.event_type.value for e in order]


# --- ProjectionFold: replay's batched fold gives what fold_into gives, event by event -----


def random_data(
    kind: EventType, rng: random.Random, namespace: str, name: str, generation: int
) -> object:
    """A valid payload of ``kind`` whose fields vary where the fold reads them."""
    revision = f"1.0.{rng.randint(0, 2)}-g{generation}"
    stable = rng.choice(["", "1.0.0-g1"])
    reason = rng.choice([Reason.SMOKE_FAILED, Reason.SUPERSEDED, Reason.INSTALL_FAILED])
    run = RunSnapshot(namespace=namespace, name=name, generation=generation, spec=SPEC)
    ref = CanaryRef(revision=revision, release=f"{name}-g{generation}", url="http://127.0.0.1:1")
    figures = SmokeFigures(
        invocations=rng.randint(1, 9), p95_ms=rng.random() * 100, passed=rng.random() < 0.5
    )
    plan = Canary(steps=(10, 50), step_interval="1s")
    step = rng.randint(1, 2)
    analysis = AnalysisStatus(step=f"{step}/2", passed=rng.random() < 0.5, reason="figures")
    shadow = Shadow(percent=20, calls=rng.randint(1, 9))
    judged = ShadowStatus(pairs=rng.randint(0, 9), passed=rng.random() < 0.5, reason="figures")
    payloads = {
        EventType.RUN_REQUESTED: lambda: RunRequested(run=run),
        EventType.SPEC_PULLED: lambda: SpecPulled(
            run=run,
            spec_digest=f"sha256:{rng.randint(0, 9)}",
            workflow_name="wf",
            workflow_version="1.0.0",
            revision=revision,
            backend_name="local",
            backend=PlntBackendSpec(type="local"),
        ),
        EventType.CANARY_INSTALLED: lambda: CanaryInstalled(run=run, canary=ref),
        EventType.INSTALL_FAILED: lambda: InstallFailed(
            reason=reason, message="no", revision=revision, release=ref.release
        ),
        EventType.SMOKE_PASSED: lambda: SmokeVerdict(canary=ref, figures=figures),
        EventType.SMOKE_FAILED: lambda: SmokeVerdict(canary=ref, figures=figures),
        EventType.STEP_TIMED_OUT: lambda: StepTimedOut(phase="Smoking", deadline_s=5),
        EventType.SHADOW_STARTED: lambda: ShadowStarted(
            canary=ref, plan=shadow, noise_percent=5, figures=ShadowStatus(calls=shadow.calls)
        ),
        EventType.SHADOW_CHECKED: lambda: ShadowJudged(canary=ref, plan=shadow, figures=judged),
        EventType.SHADOW_PASSED: lambda: ShadowJudged(canary=ref, plan=shadow, figures=judged),
        EventType.SHADOW_FAILED: lambda: ShadowJudged(canary=ref, plan=shadow, figures=judged),
        EventType.CANARY_STEPPED: lambda: CanaryStepped(
            canary=ref, plan=plan, step=step, traffic_percent=plan.steps[step - 1], hold_s=2
        ),
        EventType.ANALYSIS_PASSED: lambda: AnalysisVerdict(
            canary=ref, plan=plan, step=step, traffic_percent=10, figures=analysis
        ),
        EventType.ANALYSIS_FAILED: lambda: AnalysisVerdict(
            canary=ref, plan=plan, step=step, traffic_percent=10, figures=analysis
        ),
        EventType.ROUTE_RESTORED: lambda: RouteRestored(
            revision=revision, stable_revision=stable, reason=reason, message=rng.choice(["", "x"])
        ),
        EventType.RUN_READY: lambda: RunReady(revision=revision, endpoint=f"http://r/{name}"),
        EventType.RUN_ROLLED_BACK: lambda: RunRolledBack(
            revision=revision, stable_revision=stable, reason=reason
        ),
        EventType.RUN_FAILED: lambda: RunFailed(reason=reason, message="broken"),
        EventType.RUN_DELETED: RunDeleted,
        EventType.RUN_REMOVED: RunRemoved,
        EventType.PROMOTE_REQUESTED: lambda: OperatorRequest(by="plnt", full=rng.random() < 0.5),
        EventType.ABORT_REQUESTED: lambda: OperatorRequest(by="plnt"),
        EventType.ROLLBACK_REQUESTED: lambda: OperatorRequest(by="plnt.work/rollback=now"),
        EventType.RUN_REVERTED: lambda: RunReverted(
            revision=stable, reverted_revision=revision, reason=Reason.ROLLBACK_REQUESTED
        ),
        EventType.CAPACITY_AWAITED: lambda: CapacityAwaited(
            backend="gpu", gpu_class="a100", needed=2, largest_free=1, message="no node"
        ),
        EventType.BACKEND_AWAITED: lambda: BackendAwaited(
            backends=("gpu-far",), deleting=rng.random() < 0.5, message="waiting for gpu-far"
        ),
    }
    return payloads[kind]()


def random_history(rng: random.Random, namespace: str = "default") -> list[Envelope]:
    """Sagas of a few runs: superseded, retried, deleted and removed, with duplicates,
    equal event times and events of unknown runs; in saga order or shuffled."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    events = []
    for run in range(rng.randint(1, 3)):
        name = f"wf{run}"
        for _ in range(rng.randint(1, 4)):
            generation, attempt = rng.randint(1, 3), rng.randint(1, 2)
            kinds = rng.sample(list(EventType), rng.randint(1, 6))
            if rng.random() < 0.6:
                kinds.sort(key=lambda kind: STEP_RANK[kind])
            for kind in kinds:
                made = new_event(
                    kind,
                    random_data(kind, rng, namespace, name, generation),  # type: ignore[arg-type]
                    namespace=namespace,
                    name=name,
                    sagaid=saga_id(namespace, name, generation, attempt),
                    generation=generation,
                    source="test",
                )
                events.append(
                    made.model_copy(update={"time": start + timedelta(seconds=rng.randint(0, 9))})
                )
    events += rng.sample(events, rng.randint(0, len(events) // 3))  # redeliveries
    if rng.random() < 0.5:
        rng.shuffle(events)
    return events


def fold_into(projections: dict[str, RunProjection], event: Envelope) -> None:
    """The reference fold: ``apply_event`` for one event, by key, opening a run only on
    ``run.requested`` or ``run.deleted`` and dropping it once its removal completed."""
    key = run_key(event.namespace, event.name)
    current = projections.get(key)
    if current is None:
        if event.event_type not in OPENING_EVENTS:
            return
        current = empty_projection(event.namespace, event.name)
    updated = apply_event(current, event)
    if updated.removed:
        projections.pop(key, None)
    else:
        projections[key] = updated


def fold_events(events: list[Envelope]) -> dict[str, RunProjection]:
    """Replay's fold (``ProjectionFold``) of ``events``."""
    fold = ProjectionFold()
    for event in events:
        fold.add(event)
    return fold.projections()


def fold_one_by_one(events: list[Envelope]) -> tuple[dict[str, RunProjection], set[str]]:
    """``fold_into`` event by event; also every key that was open at some point."""
    projections: dict[str, RunProjection] = {}
    opened: set[str] = set()
    for item in events:
        fold_into(projections, item)
        opened |= projections.keys()
    return projections, opened


def test_fold_events_gives_what_fold_into_gives_over_generated_histories() -> None:
    rng = random.Random(20261130)
    removed = superseded = 0
    for _ in range(1500):
        events = random_history(rng)
        expected, opened = fold_one_by_one(events)
        folded = fold_events(events)
        assert folded == expected
        assert {k: p.model_dump_json() for k, p in folded.items()} == {
            k: p.model_dump_json() for k, p in expected.items()
        }
        assert [p.model_fields_set for p in folded.values()] == [
            p.model_fields_set for p in expected.values()
        ]
        removed += bool(opened - expected.keys())
        superseded += any(p.generation > 1 for p in expected.values())
    assert removed > 100 and superseded > 300  # the histories cover both cases


def test_fold_events_drops_a_removed_run_and_reopens_it_on_a_new_request() -> None:
    deleted = event(EventType.RUN_DELETED, RunDeleted(), attempt=2)
    removed = event(EventType.RUN_REMOVED, RunRemoved(), attempt=2)
    again = happy_saga(generation=2)
    assert fold_events([*happy_saga(), deleted, removed]) == {}
    assert fold_events([*happy_saga(), deleted, removed, *again]) == {"default.wf": fold(again)}


def test_fold_events_ignores_events_of_a_run_no_request_opened() -> None:
    assert fold_events(happy_saga()[1:]) == {}


def test_apply_event_leaves_the_projection_it_was_given_untouched() -> None:
    rng = random.Random(5)
    for _ in range(200):
        projections: dict[str, RunProjection] = {}
        for item in random_history(rng):
            current = projections.get(item.name) or empty_projection("default", item.name)
            before = current.model_dump_json()
            projections[item.name] = apply_event(current, item)
            assert current.model_dump_json() == before


def test_of_two_events_at_one_step_and_time_the_later_in_the_stream_sets_each_field() -> None:
    start = happy_saga()[:3]
    at = start[-1].time + timedelta(seconds=1)
    figures = SmokeFigures(passed=False, invocations=3, reason="p95 over budget")
    failed = event(EventType.SMOKE_FAILED, SmokeVerdict(canary=canary(), figures=figures))
    passed = happy_saga()[3]
    steps = [
        event(
            EventType.CANARY_STEPPED,
            CanaryStepped(
                canary=canary(), plan=SPEC.canary, step=1, traffic_percent=7, hold_s=hold
            ),
        ).model_copy(update={"time": at})
        for hold in (2.0, 3.0)
    ]
    tied = [failed.model_copy(update={"time": at}), passed.model_copy(update={"time": at})]
    projection = fold([*start, *tied])
    assert projection.status.phase is Phase.PROMOTING
    assert projection.status.smoke.passed
    assert {c.type.value: c.status for c in projection.status.conditions}["SmokePassed"] == "True"
    assert fold([*start, *steps]).step_hold_s == 3.0


STEPPED_PLAN = Canary(steps=(10, 50), step_interval="30s")
GATED_PLAN = Canary(steps=(10, 50), step_interval="30s", manual_gate=True)


def smoked() -> RunProjection:
    """A run whose canary passed its smoke test (Promoting, the canary at 7 %)."""
    return fold(happy_saga()[:4])


def verdict(kind: EventType, step: int, plan: Canary = STEPPED_PLAN) -> Envelope:
    figures = AnalysisStatus(
        step=f"{step}/2", passed=kind is EventType.ANALYSIS_PASSED, reason="ok"
    )
    return event(
        kind,
        AnalysisVerdict(canary=canary(), plan=plan, step=step, traffic_percent=10, figures=figures),
    )


def test_a_canary_step_shows_its_weight_label_and_hold() -> None:
    stepped = event(
        EventType.CANARY_STEPPED,
        CanaryStepped(canary=canary(), plan=STEPPED_PLAN, step=2, traffic_percent=50, hold_s=45),
    )
    projection = apply_event(smoked(), stepped)
    assert projection.status.phase is Phase.PROGRESSING
    assert projection.status.canary.model_dump() == {
        "revision": "1.0.0-g1",
        "traffic_percent": 50,
        "step": "2/2",
    }
    assert projection.status.message == "step 2/2: 50% on 1.0.0-g1, live calls judged for 30s"
    assert projection.step_hold_s == 45


@pytest.mark.parametrize(
    ("step", "plan", "phase", "message"),
    [
        (1, STEPPED_PLAN, Phase.PROGRESSING, "step 1/2 passed: ok"),
        (2, STEPPED_PLAN, Phase.PROMOTING, "step 2/2 passed: ok"),
        (1, GATED_PLAN, Phase.PROGRESSING, "step 1/2 passed: ok"),
        (2, GATED_PLAN, Phase.PAUSED, "waiting at the manual gate: plnt promote wf"),
    ],
    ids=["step-1", "last-step", "gated-step-1", "gated-last-step"],
)
def test_a_passed_step_moves_on_promotes_after_the_last_or_waits_at_the_gate(
    step: int, plan: Canary, phase: Phase, message: str
) -> None:
    projection = apply_event(smoked(), verdict(EventType.ANALYSIS_PASSED, step, plan))
    assert (projection.status.phase, projection.status.message) == (phase, message)
    assert projection.status.analysis.step == f"{step}/2"
    assert projection.status.analysis.passed


def test_a_failed_step_rolls_back_naming_the_step() -> None:
    projection = apply_event(smoked(), verdict(EventType.ANALYSIS_FAILED, 1))
    assert projection.status.phase is Phase.ROLLING_BACK
    assert projection.status.message == "step 1/2 failed: ok"
    assert projection.status.analysis.step == "1/2"
    assert not projection.status.analysis.passed


def conditions_of(projection: RunProjection) -> dict[str, tuple[str, str, str]]:
    return {c.type.value: (c.status, c.reason, c.message) for c in projection.status.conditions}


def test_a_failed_install_rolls_back_with_the_install_condition_false() -> None:
    failed = event(
        EventType.INSTALL_FAILED,
        InstallFailed(
            reason=Reason.INSTALL_FAILED, message="image pull", revision="1.0.0-g1", release="wf"
        ),
    )
    projection = apply_event(fold(happy_saga()[:2]), failed)
    assert (projection.status.phase, projection.status.message) == (
        Phase.ROLLING_BACK,
        "image pull",
    )
    assert conditions_of(projection)["CanaryInstalled"] == ("False", "InstallFailed", "image pull")


@pytest.mark.parametrize(("promoted_before", "ready"), [(True, "True"), (False, "False")])
def test_a_failed_run_is_ready_only_if_an_earlier_revision_still_serves(
    promoted_before: bool, ready: str
) -> None:
    start = fold(happy_saga(generation=1)) if promoted_before else None
    second = happy_saga(generation=2)[:2]
    failed = event(
        EventType.RUN_FAILED, RunFailed(reason=Reason.SPEC_INVALID, message="bad"), generation=2
    )
    projection = fold([*second, failed], start)
    assert projection.status.phase is Phase.FAILED
    assert projection.status.message == "SpecInvalid: bad"
    assert projection.status.canary.traffic_percent == 0
    assert conditions_of(projection)["Ready"] == (ready, "SpecInvalid", "bad")


def test_a_reverted_run_serves_the_earlier_revision_again() -> None:
    reverted = event(
        EventType.RUN_REVERTED,
        RunReverted(
            revision="0.9.0-g0",
            reverted_revision="1.0.0-g1",
            reason=Reason.ROLLBACK_REQUESTED,
            message="asked",
        ),
        attempt=2,
    )
    projection = apply_event(fold(happy_saga()), reverted)
    assert projection.status.phase is Phase.REVERTED
    assert (projection.stable_revision, projection.status.revision) == ("0.9.0-g0", "0.9.0-g0")
    assert projection.status.message == "reverted 1.0.0-g1 to 0.9.0-g0: asked"
    assert conditions_of(projection)["Ready"] == ("True", "RollbackRequested", "asked")


def test_a_deletion_says_what_it_removes_and_the_removal_says_it_is_done() -> None:
    deleted = apply_event(fold(happy_saga()), event(EventType.RUN_DELETED, RunDeleted(), attempt=2))
    assert (deleted.deleting, deleted.removed) == (True, False)
    assert (deleted.status.phase, deleted.status.message) == (
        Phase.DELETING,
        "removing routes and releases",
    )
    removed = apply_event(deleted, event(EventType.RUN_REMOVED, RunRemoved(), attempt=2))
    assert (removed.deleting, removed.removed, removed.status.message) == (True, True, "removed")
    # a removal seen without its deletion (replayed from the middle) still reads as deleting
    alone = apply_event(fold(happy_saga()), event(EventType.RUN_REMOVED, RunRemoved(), attempt=2))
    assert (alone.deleting, alone.removed) == (True, True)


def test_a_rollback_or_a_deletion_waiting_for_a_silent_cluster_says_so_in_its_status() -> None:
    waiting = "waiting for the API of PlntBackend 'gpu-far' to answer"
    restored = event(
        EventType.ROUTE_RESTORED, RouteRestored(revision="1.0.0-g1", reason=Reason.SMOKE_FAILED)
    )
    rolling_back = apply_event(smoked(), restored)
    awaited = BackendAwaited(backends=("gpu-far",), message=waiting)
    held = apply_event(rolling_back, event(EventType.BACKEND_AWAITED, awaited))
    assert (held.status.phase, held.status.message) == (Phase.ROLLING_BACK, waiting)
    ended = apply_event(
        held,
        event(
            EventType.RUN_FAILED,
            RunFailed(reason=Reason.SMOKE_FAILED, message="p95", phase=Phase.ROLLING_BACK),
        ),
    )
    assert ended.status.message != waiting
    # a deletion's wait ranks with the deletion: not stale after it, and still Deleting
    deleted = apply_event(fold(happy_saga()), event(EventType.RUN_DELETED, RunDeleted(), attempt=2))
    deleting = awaited.model_copy(update={"deleting": True})
    held = apply_event(deleted, event(EventType.BACKEND_AWAITED, deleting, attempt=2))
    assert (held.status.phase, held.status.message) == (Phase.DELETING, waiting)


def test_a_failed_smoke_test_rolls_back_with_its_reason() -> None:
    figures = SmokeFigures(passed=False, invocations=3, reason="p95 900ms over 500ms")
    failed = event(EventType.SMOKE_FAILED, SmokeVerdict(canary=canary(), figures=figures))
    projection = apply_event(fold(happy_saga()[:3]), failed)
    assert projection.status.phase is Phase.ROLLING_BACK
    assert projection.status.message == "smoke test failed: p95 900ms over 500ms"
    assert conditions_of(projection)["SmokePassed"] == (
        "False",
        "SmokeFailed",
        "p95 900ms over 500ms",
    )
    assert projection.status.smoke.invocations == 3


def test_a_canary_missing_the_runner_contract_rolls_back_with_that_reason() -> None:
    missed = "runner contract v1: clause 3 invoke: response lacks the x-plnt-tokens header"
    figures = SmokeFigures(passed=False, reason=missed, failure=Reason.RUNNER_CONTRACT)
    failed = event(EventType.SMOKE_FAILED, SmokeVerdict(canary=canary(), figures=figures))
    projection = apply_event(fold(happy_saga()[:3]), failed)
    assert conditions_of(projection)["SmokePassed"] == ("False", "RunnerContract", missed)
    assert projection.status.message == f"smoke test failed: {missed}"


def test_a_step_past_its_deadline_rolls_back_saying_which_and_how_long() -> None:
    timed_out = event(EventType.STEP_TIMED_OUT, StepTimedOut(phase="Installing", deadline_s=300))
    projection = apply_event(fold(happy_saga()[:2]), timed_out)
    assert (projection.status.phase, projection.status.message) == (
        Phase.ROLLING_BACK,
        "Installing passed its 300s deadline",
    )


@pytest.mark.parametrize(
    ("message", "shown"), [("", "canary 1.0.0-g1 out of the route"), ("aborted", "aborted")]
)
def test_a_restored_route_shows_the_canary_at_zero_and_why(message: str, shown: str) -> None:
    restored = event(
        EventType.ROUTE_RESTORED,
        RouteRestored(revision="1.0.0-g1", reason=Reason.SMOKE_FAILED, message=message),
    )
    projection = apply_event(smoked(), restored)
    assert projection.status.phase is Phase.ROLLING_BACK
    assert projection.status.canary.model_dump() == {
        "revision": "1.0.0-g1",
        "traffic_percent": 0,
        "step": "",
    }
    assert projection.status.message == shown


def test_a_promotion_keeps_the_new_stable_and_the_revision_it_replaced() -> None:
    ready = event(
        EventType.RUN_READY,
        RunReady(revision="1.0.0-g1", endpoint="http://r/wf", previous_revision="0.9.0-g0"),
    )
    projection = apply_event(smoked(), ready)
    assert (projection.stable_revision, projection.previous_revision) == ("1.0.0-g1", "0.9.0-g0")


def test_a_rollback_with_nothing_promoted_before_says_nothing_keeps_serving() -> None:
    rolled_back = event(
        EventType.RUN_ROLLED_BACK,
        RunRolledBack(revision="1.0.0-g1", reason=Reason.SMOKE_FAILED, message="errors"),
    )
    projection = apply_event(smoked(), rolled_back)
    assert projection.status.message == "rolled back 1.0.0-g1: errors"
    assert conditions_of(projection)["Ready"] == ("False", "SmokeFailed", "errors")


def installed_with(plan: Canary) -> list[Envelope]:
    spec = SPEC.model_copy(update={"canary": plan})
    run = RunSnapshot(namespace="default", name="wf", generation=1, spec=spec)
    saga = happy_saga()[:4]
    saga[2] = event(EventType.CANARY_INSTALLED, CanaryInstalled(run=run, canary=canary()))
    return saga


@pytest.mark.parametrize(
    ("plan", "phase"),
    [
        (Canary(manual_gate=True), Phase.PAUSED),
        (Canary(manual_gate=True, steps=(10, 50)), Phase.PROMOTING),
        (Canary(), Phase.PROMOTING),
    ],
    ids=["gate-without-steps", "gate-after-the-steps", "no-gate"],
)
def test_a_passed_smoke_test_waits_at_the_gate_only_when_no_steps_come_first(
    plan: Canary, phase: Phase
) -> None:
    saga = installed_with(plan)
    for events in (saga, [*saga[:2], saga[3], saga[2]]):  # the smoke verdict first too
        projection = fold(events)
        assert projection.status.phase is phase
        if phase is Phase.PAUSED:
            assert projection.status.message == "waiting at the manual gate: plnt promote wf"


def test_a_smoke_verdict_keeps_every_figure() -> None:
    golden = (GoldenResult(name="polite", passed=True, reason="contains 'thank'"),)
    figures = SmokeFigures(
        passed=True,
        invocations=5,
        p50_ms=120,
        p95_ms=480,
        error_percent=20,
        reason="fine",
        golden=golden,
    )
    smoked_once = event(EventType.SMOKE_PASSED, SmokeVerdict(canary=canary(), figures=figures))
    smoke = apply_event(fold(happy_saga()[:3]), smoked_once).status.smoke
    assert smoke.model_dump() == {
        "invocations": 5,
        "p50_ms": 120,
        "p95_ms": 480,
        "error_percent": 20,
        "passed": True,
        "reason": "fine",
        "golden": tuple(g.model_dump() for g in golden),
    }


def test_an_event_that_changes_nothing_hands_back_the_projection_it_was_given() -> None:
    projection = fold(happy_saga(generation=2))
    older = happy_saga(generation=1)[1]
    again = happy_saga(generation=2)[-1]  # the terminal event once more
    assert apply_event(projection, older) is projection
    assert apply_event(projection, again) is projection


def test_the_phase_since_moves_with_the_phase_and_the_status_names_the_saga() -> None:
    saga = happy_saga()
    projection = fold(saga[:3])
    assert projection.phase_since == saga[2].time  # Smoking since the canary was installed
    assert projection.status.saga_id == "default.wf.1.1"
    assert projection.status.observed_generation == 1


def test_a_late_step_of_the_same_kind_never_overwrites_what_a_newer_one_set() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    newer, older = (
        event(
            EventType.CANARY_STEPPED,
            CanaryStepped(canary=canary(), plan=STEPPED_PLAN, step=1, traffic_percent=10, hold_s=h),
        ).model_copy(update={"time": at + timedelta(seconds=s)})
        for h, s in ((45.0, 2), (30.0, 1))
    )
    projection = fold([newer, older], smoked())
    assert projection.step_hold_s == 45.0


def test_a_new_saga_starts_with_no_canary_smoke_or_analysis_and_no_gate() -> None:
    gated = installed_with(Canary(manual_gate=True))  # the first saga waits at the gate
    first = fold([*gated, verdict(EventType.ANALYSIS_FAILED, 1)])
    assert first.gate_after_smoke
    second = happy_saga(generation=2)
    # the new saga's smoke verdict folded before its install: no gate carried over
    projection = fold([*second[:2], second[3]], first)
    assert projection.status.phase is Phase.PROMOTING
    assert projection.gate_after_smoke is False
    assert projection.status.analysis == AnalysisStatus()
    projection = fold(second[:2], first)
    assert projection.status.canary == CanaryStatus()
    assert projection.status.smoke == SmokeStatus()


def test_replays_fold_waits_at_the_gate_as_the_live_fold_does() -> None:
    saga = installed_with(Canary(manual_gate=True))
    for events in (saga, [*saga[:2], saga[3], saga[2]]):
        batched = ProjectionFold()
        for item in events:
            batched.add(item)
        projection = batched.projections()["default.wf"]
        assert (projection.status.phase, projection.status.message) == (
            Phase.PAUSED,
            "waiting at the manual gate: plnt promote wf",
        )


def test_a_requested_run_is_pulling_not_ready_yet_and_knows_when_it_was_asked_for() -> None:
    requested = happy_saga(generation=3)[0]
    projection = apply_event(empty_projection("default", "wf"), requested)
    assert projection.requested_at == requested.time
    assert projection.status.message == "pulling spec"
    assert conditions_of(projection)["Ready"] == ("False", "Progressing", "rolling out")
    ready = next(c for c in projection.status.conditions if c.type.value == "Ready")
    assert ready.observed_generation == 3


def test_a_new_saga_opened_by_an_event_that_says_nothing_drops_the_old_message() -> None:
    first = fold(happy_saga())
    assert first.status.message == "serving 1.0.0-g1"
    promote = event(EventType.PROMOTE_REQUESTED, OperatorRequest(by="plnt"), generation=2)
    projection = apply_event(first, promote)
    assert (projection.saga_id, projection.status.message) == ("default.wf.2.1", "")
