"""Pure decisions of the saga services: no bus, no HTTP, just inputs and outcomes."""

from datetime import UTC, datetime, timedelta

import pytest

from plnt_common.events import (
    CanaryRef,
    EventType,
    RunDeleted,
    RunSnapshot,
    SpecPulled,
    new_event,
    saga_id,
)
from plnt_common.projection import RunProjection
from plnt_common.releases import DesiredRelease, LlmConfig, ReleaseRole
from plnt_common.resources import (
    PlacementEntry,
    PlntBackendSpec,
    SmokeTest,
    WorkflowRunSpec,
    WorkflowRunStatus,
)
from plnt_common.routes import RouteEntry, RouteTarget
from plnt_common.saga import SagaState, TerminalClaim, classify
from plnt_common.status import Phase
from plnt_installer import logic as installer
from plnt_promoter import logic as promoter
from plnt_smoke.logic import Sample, judge, percentile
from plnt_watcher import logic as watcher

STABLE = RouteTarget(revision="1.0.0-g1", url="http://127.0.0.1:1", saga_id="default.wf.1.1")
CANARY = RouteTarget(revision="2.0.0-g2", url="http://127.0.0.1:2", saga_id="default.wf.2.1")


def event(generation: int, attempt: int = 1):  # type: ignore[no-untyped-def]
    return new_event(
        EventType.RUN_DELETED,
        RunDeleted(),
        namespace="default",
        name="wf",
        sagaid=saga_id("default", "wf", generation, attempt),
        generation=generation,
        source="test",
    )


def projection(
    saga: str, *, phase: Phase = Phase.PULLING, rank: int = 1, since: datetime | None = None
) -> RunProjection:
    generation = int(saga.split(".")[-2])
    return RunProjection(
        namespace="default",
        name="wf",
        saga_id=saga,
        generation=generation,
        rank=rank,
        status=WorkflowRunStatus(phase=phase),
        phase_since=since,
    )


# --- saga state ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("latest", "ended", "expected"),
    [
        ("", False, SagaState.CURRENT),
        ("default.wf.2.1", False, SagaState.CURRENT),
        ("default.wf.3.1", False, SagaState.SUPERSEDED),
        ("default.wf.2.2", False, SagaState.SUPERSEDED),
        ("default.wf.1.3", False, SagaState.SUPERSEDED),
        ("default.wf.3.1", True, SagaState.ENDED),
    ],
    ids=[
        "unknown",
        "same-saga",
        "newer-generation",
        "deletion-saga",
        "recreated-run",
        "ended-wins",
    ],
)
def test_a_saga_is_classified_against_the_runs_latest_saga(
    latest: str, ended: bool, expected: SagaState
) -> None:
    assert classify(event(2), latest, ended) is expected


CLAIMED = event(2)


@pytest.mark.parametrize(
    ("raw", "event_type", "kept"),
    [
        (CLAIMED.model_dump_json().encode(), "run.deleted", True),
        (b"run.failed", "run.failed", False),
        (b"{not json", "", False),
    ],
    ids=["the-event", "type-only", "unreadable"],
)
def test_a_terminal_claim_reads_back_what_claimed_it(
    raw: bytes, event_type: str, kept: bool
) -> None:
    claim = TerminalClaim.decode(raw)
    assert claim.event_type == event_type
    assert (claim.event is not None) is kept
    if kept:
        assert claim.event is not None
        assert claim.event.model_dump() == CLAIMED.model_dump()
        assert TerminalClaim.decode(claim.encode()).encode() == raw


# --- watcher ------------------------------------------------------------------------------


def facts(
    *, generation: int = 1, finalizers: tuple[str, ...] = (), deleting: bool = False
) -> watcher.ResourceFacts:
    return watcher.ResourceFacts(
        namespace="default",
        name="wf",
        uid="u",
        generation=generation,
        finalizers=finalizers,
        deleting=deleting,
    )


def test_a_new_run_gets_a_finalizer_pending_status_and_a_saga() -> None:
    assert watcher.decide(facts(), None) == [
        watcher.Action.ADD_FINALIZER,
        watcher.Action.WRITE_PENDING,
        watcher.Action.REQUEST_SAGA,
    ]


def test_a_new_generation_starts_a_saga_and_the_same_one_does_nothing() -> None:
    seen = projection("default.wf.1.1")
    assert watcher.decide(facts(generation=2, finalizers=(watcher.FINALIZER,)), seen) == [
        watcher.Action.REQUEST_SAGA
    ]
    assert watcher.decide(facts(generation=1, finalizers=(watcher.FINALIZER,)), seen) == []


def test_deletion_is_requested_once_and_the_finalizer_released_after_removal() -> None:
    marked = facts(finalizers=(watcher.FINALIZER,), deleting=True)
    assert watcher.decide(marked, projection("default.wf.1.1")) == [watcher.Action.REQUEST_DELETION]
    deleting = projection("default.wf.1.2").model_copy(update={"deleting": True})
    assert watcher.decide(marked, deleting) == []
    removed = deleting.model_copy(update={"removed": True})
    assert watcher.decide(marked, removed) == [watcher.Action.RELEASE_FINALIZER]


def test_a_step_is_overdue_only_past_its_phase_deadline() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    deadlines = {"Smoking": 10.0}
    fresh = projection(
        "default.wf.1.1", phase=Phase.SMOKING, rank=3, since=now - timedelta(seconds=5)
    )
    late = fresh.model_copy(update={"phase_since": now - timedelta(seconds=11)})
    ended = late.model_copy(update={"rank": 9})
    assert watcher.overdue_phase(fresh, now=now, deadlines=deadlines) is None
    assert watcher.overdue_phase(late, now=now, deadlines=deadlines) == ("Smoking", 10.0)
    assert watcher.overdue_phase(ended, now=now, deadlines=deadlines) is None


# --- promoter -----------------------------------------------------------------------------


def test_a_first_canary_gets_no_traffic_until_promoted() -> None:
    entry = promoter.with_canary(
        None,
        namespace="default",
        name="wf",
        canary=CANARY,
        traffic_percent=5,
        endpoint="http://r/e",
    )
    assert entry is not None
    assert (entry.canary, entry.canary_weight, entry.stable) == (CANARY, 0, None)


def test_a_canary_beside_a_stable_gets_its_share() -> None:
    current = RouteEntry(namespace="default", name="wf", stable=STABLE)
    entry = promoter.with_canary(
        current,
        namespace="default",
        name="wf",
        canary=CANARY,
        traffic_percent=5,
        endpoint="http://r/e",
    )
    assert entry is not None
    assert (entry.stable, entry.canary, entry.canary_weight) == (STABLE, CANARY, 5)


def test_a_restored_saga_is_never_routed_again() -> None:
    restored = promoter.without_canary(None, namespace="default", name="wf", saga_id=CANARY.saga_id)
    again = promoter.with_canary(
        restored,
        namespace="default",
        name="wf",
        canary=CANARY,
        traffic_percent=5,
        endpoint="http://r/e",
    )
    assert again is None


def test_a_redelivered_install_changes_neither_a_stepped_nor_a_promoted_canary() -> None:
    """A promoter killed before acking canary.installed gets it again after the saga moved
    on: a step's weight stays, and a promoted revision is not routed as its own canary."""
    stepped = RouteEntry(
        namespace="default", name="wf", stable=STABLE, canary=CANARY, canary_weight=50
    )
    promoted = RouteEntry(namespace="default", name="wf", stable=CANARY)
    for entry in (stepped, promoted):
        again = promoter.with_canary(
            entry,
            namespace="default",
            name="wf",
            canary=CANARY,
            traffic_percent=5,
            endpoint="http://r/e",
        )
        assert again is None, entry


def test_restoring_takes_out_only_this_sagas_canary() -> None:
    current = RouteEntry(
        namespace="default", name="wf", stable=STABLE, canary=CANARY, canary_weight=5
    )
    other = promoter.without_canary(
        current, namespace="default", name="wf", saga_id="default.wf.9.1"
    )
    assert (other.canary, other.canary_weight) == (CANARY, 5)
    mine = promoter.without_canary(current, namespace="default", name="wf", saga_id=CANARY.saga_id)
    assert (mine.stable, mine.canary, mine.canary_weight) == (STABLE, None, 0)


@pytest.mark.parametrize(
    ("state", "entry", "verdict"),
    [
        (
            SagaState.CURRENT,
            RouteEntry(namespace="default", name="wf", stable=STABLE, canary=CANARY),
            promoter.Verdict.PROMOTE,
        ),
        (
            SagaState.CURRENT,
            RouteEntry(namespace="default", name="wf", stable=CANARY),
            promoter.Verdict.ALREADY_PROMOTED,
        ),
        (SagaState.CURRENT, None, promoter.Verdict.WAIT),
        (
            SagaState.SUPERSEDED,
            RouteEntry(namespace="default", name="wf", canary=CANARY),
            promoter.Verdict.RESTORE,
        ),
        (
            SagaState.ENDED,
            RouteEntry(namespace="default", name="wf", canary=CANARY),
            promoter.Verdict.IGNORE,
        ),
    ],
    ids=["promote", "redelivered", "canary-not-routed-yet", "superseded", "ended"],
)
def test_a_passed_smoke_test_is_decided_by_saga_state_and_route(
    state: SagaState, entry: RouteEntry | None, verdict: promoter.Verdict
) -> None:
    assert promoter.decide_on_pass(state, entry, CANARY.saga_id) is verdict


def test_promotion_moves_all_traffic_to_the_canary() -> None:
    current = RouteEntry(
        namespace="default", name="wf", stable=STABLE, canary=CANARY, canary_weight=5
    )
    promoted = promoter.promoted(current, "http://r/workflows/wf/invoke")
    assert (promoted.stable, promoted.canary, promoted.canary_weight) == (CANARY, None, 0)


@pytest.mark.parametrize(
    ("namespace", "expected"),
    [
        ("default", "http://r:8080/workflows/wf/invoke"),
        ("team-a", "http://r:8080/namespaces/team-a/workflows/wf/invoke"),
    ],
    ids=["default", "namespaced"],
)
def test_the_endpoint_is_the_public_router_url_plus_the_invoke_path(
    namespace: str, expected: str
) -> None:
    assert promoter.endpoint_url("http://r:8080/", namespace, "wf") == expected


# --- smoke --------------------------------------------------------------------------------


def test_percentiles_use_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 0.5), percentile(values, 0.95), percentile([], 0.5)) == (
        50.0,
        95.0,
        0.0,
    )


def test_a_canary_within_budget_passes() -> None:
    samples = [Sample(latency_ms=10.0 + i, ok=True) for i in range(20)]
    figures = judge(samples, SmokeTest(invocations=20, p95BudgetMs=100, errorBudgetPercent=0))
    assert figures.passed
    assert figures.invocations == 20
    assert (figures.p50_ms, figures.p95_ms, figures.error_percent) == (19.0, 28.0, 0.0)


def test_errors_over_budget_fail_naming_the_first_error() -> None:
    samples = [Sample(5.0, ok=True)] * 9 + [Sample(5.0, ok=False, error="HTTP 500: boom")]
    figures = judge(samples, SmokeTest(invocations=10, p95BudgetMs=100, errorBudgetPercent=5))
    assert not figures.passed
    assert "error rate 10.0% over budget 5%" in figures.reason
    assert "HTTP 500: boom" in figures.reason


def test_a_slow_canary_fails_on_p95() -> None:
    samples = [Sample(50.0, ok=True)] * 18 + [Sample(900.0, ok=True)] * 2
    figures = judge(samples, SmokeTest(invocations=20, p95BudgetMs=500, errorBudgetPercent=1))
    assert not figures.passed
    assert "p95 900 ms over budget 500 ms" in figures.reason


# --- installer ----------------------------------------------------------------------------


def release(generation: int, role: ReleaseRole) -> DesiredRelease:
    return DesiredRelease(
        namespace="default",
        run_name="wf",
        release=f"wf-g{generation}",
        revision=f"1.0.0-g{generation}",
        role=role,
        saga_id=saga_id("default", "wf", generation),
        spec_digest="sha256:" + "a" * 64,
        workflow_name="wf",
    )


def test_after_promotion_older_releases_retire_and_a_newer_canary_stays() -> None:
    releases = [
        release(1, ReleaseRole.STABLE),
        release(2, ReleaseRole.CANARY),
        release(3, ReleaseRole.CANARY),
    ]
    retired = installer.retire_after_promotion(releases, promoted_saga=saga_id("default", "wf", 2))
    assert [r.release for r in retired] == ["wf-g1"]


def test_a_failed_canary_ends_rolled_back_only_when_a_stable_serves() -> None:
    releases = [release(1, ReleaseRole.STABLE), release(2, ReleaseRole.CANARY)]
    stable = installer.stable_revision(releases, excluding_saga=saga_id("default", "wf", 2))
    assert stable == "1.0.0-g1"
    assert installer.failure_terminal(stable) is EventType.RUN_ROLLED_BACK
    assert installer.failure_terminal("") is EventType.RUN_FAILED


def test_canary_ref_round_trips() -> None:
    ref = CanaryRef(revision="1.0.0-g1", release="wf-g1", url="http://x")
    assert CanaryRef.model_validate_json(ref.model_dump_json()) == ref


def pulled(*, replicas_min: int, llm: dict[str, str] | None) -> SpecPulled:
    spec = WorkflowRunSpec.model_validate(
        {
            "workflow": {"ref": "wf@1.0.0", "registry": "file:///registry"},
            "backend": {"cluster": "c", "gpuClass": "nvidia.com/h100", "gpuCount": 2},
            "replicas": {"min": replicas_min, "max": max(1, replicas_min)},
        }
    )
    backend = PlntBackendSpec.model_validate({"type": "local", **({"llm": llm} if llm else {})})
    return SpecPulled(
        run=RunSnapshot(namespace="team", name="wf", generation=3, spec=spec),
        spec_digest="sha256:" + "b" * 64,
        workflow_name="wf",
        workflow_version="1.0.0",
        revision="1.0.0-g3",
        backend_name="c",
        backend=backend,
    )


def test_a_canary_release_is_desired_from_the_pulled_spec_and_its_backend() -> None:
    llm = {"baseUrl": "https://llm.example/v1", "model": "m", "apiKeyEnv": "KEY"}
    desired = installer.desired_canary(pulled(replicas_min=3, llm=llm), saga_id="team.wf.3.1")
    assert desired == DesiredRelease(
        namespace="team",
        run_name="wf",
        release="team-wf-g3",
        revision="1.0.0-g3",
        role=ReleaseRole.CANARY,
        saga_id="team.wf.3.1",
        spec_digest="sha256:" + "b" * 64,
        workflow_name="wf",
        replicas=3,
        gpu_class="nvidia.com/h100",
        gpu_count=2,
        llm=LlmConfig(base_url="https://llm.example/v1", model="m", api_key_env="KEY"),
        backend_name="c",
    )
    offline = installer.desired_canary(pulled(replicas_min=0, llm=None), saga_id="team.wf.3.1")
    assert (offline.replicas, offline.llm) == (1, LlmConfig())


def test_a_replacement_canary_is_named_after_its_backend_beside_the_lost_copy() -> None:
    lost = PlacementEntry(backend="east", state="Lost", reason="RunnerFailed")
    data = pulled(replicas_min=1, llm=None).model_copy(update={"passed_over": (lost,)})
    replacing = installer.desired_canary(data, saga_id="team.wf.3.2")
    assert replacing.release == "team-wf-g3-c"
    skipped = lost.model_copy(update={"state": "Skipped"})
    first = data.model_copy(update={"passed_over": (skipped,)})
    assert installer.desired_canary(first, saga_id="team.wf.3.1").release == "team-wf-g3"


def test_the_stable_revision_is_a_stable_release_of_another_saga_only() -> None:
    canary_only = [release(2, ReleaseRole.CANARY)]
    assert installer.stable_revision(canary_only) == ""
    own_stable = [release(2, ReleaseRole.STABLE)]
    assert installer.stable_revision(own_stable) == "1.0.0-g2"
    assert installer.stable_revision(own_stable, excluding_saga=saga_id("default", "wf", 2)) == ""


def test_only_older_sagas_releases_retire_after_a_promotion() -> None:
    older_attempt = release(2, ReleaseRole.STABLE).model_copy(
        update={"saga_id": saga_id("default", "wf", 2, 1)}
    )
    promoted = release(2, ReleaseRole.CANARY).model_copy(
        update={"saga_id": saga_id("default", "wf", 2, 2), "release": "wf-g2-a2"}
    )
    retired = installer.retire_after_promotion(
        [older_attempt, promoted], promoted_saga=promoted.saga_id
    )
    assert retired == [older_attempt]
    assert installer.retire_after_promotion([promoted], promoted_saga=promoted.saga_id) == []


def test_the_endpoint_ignores_a_trailing_slash_and_names_other_namespaces() -> None:
    assert promoter.endpoint_url("http://r:8080/", "default", "wf") == (
        "http://r:8080/workflows/wf/invoke"
    )
    assert promoter.endpoint_url("http://r:8080//", "team", "wf") == (
        "http://r:8080/namespaces/team/workflows/wf/invoke"
    )
    assert promoter.endpoint_url("http://routerX", "default", "wf") == (  # only slashes go
        "http://routerX/workflows/wf/invoke"
    )


def test_a_route_target_keeps_the_canarys_release_and_the_entry_its_endpoint() -> None:
    canary = CanaryRef(revision="2.0.0-g2", release="wf-g2", url="http://127.0.0.1:2")
    routed = promoter.target(canary, "default.wf.2.1")
    assert routed == RouteTarget(
        revision="2.0.0-g2", url="http://127.0.0.1:2", saga_id="default.wf.2.1", release="wf-g2"
    )
    existing = RouteEntry(namespace="default", name="wf", stable=STABLE, endpoint="http://old")
    added = promoter.with_canary(
        existing,
        namespace="default",
        name="wf",
        canary=routed,
        traffic_percent=10,
        endpoint="http://new",
    )
    assert added is not None and added.endpoint == "http://old"
    fresh = promoter.with_canary(
        None,
        namespace="default",
        name="wf",
        canary=routed,
        traffic_percent=10,
        endpoint="http://new",
    )
    assert fresh is not None and fresh.endpoint == "http://new"
    assert added is not None
    assert promoter.promoted(added, "http://newer").endpoint == "http://newer"


def test_promoted_by_names_the_saga_whose_canary_became_the_stable() -> None:
    promoted = RouteEntry(namespace="default", name="wf", stable=CANARY)
    assert promoter.promoted_by(promoted, CANARY.saga_id)
    assert not promoter.promoted_by(promoted, "default.wf.9.1")
    routed = RouteEntry(namespace="default", name="wf", stable=STABLE, canary=CANARY)
    assert not promoter.promoted_by(routed, CANARY.saga_id)
    assert not promoter.promoted_by(None, CANARY.saga_id)
