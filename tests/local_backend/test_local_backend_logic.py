"""Pure decisions of the local backend: keys, fingerprints, adoption, next step, back-off."""

import pytest

from plnt_common.releases import (
    DesiredRelease,
    LlmConfig,
    ObservedRelease,
    ReleasePhase,
    ReleaseRole,
)
from plnt_common.workflow import spec_digest
from plnt_local_backend import logic
from plnt_local_backend.logic import (
    Adoption,
    Failure,
    FoundRunner,
    ReleaseKey,
    RunnerView,
    Step,
)

DESIRED = DesiredRelease(
    namespace="default",
    run_name="flow",
    release="flow-g1",
    revision="1.0.0-g1",
    saga_id="default.flow.1.1",
    spec_digest="sha256:" + "a" * 64,
    workflow_name="flow",
)
FINGERPRINT = logic.launch_fingerprint(DESIRED)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("desired.default.flow-g1", ReleaseKey("default", "flow-g1")),
        ("observed.default.flow-g1", None),
        ("desired.default", None),
        ("desired.default.flow-g1.extra", None),
        ("desired.default.a/b", None),
        ("desired.Default.flow-g1", None),
        ("desired.default.-flow", None),
    ],
    ids=["valid", "other-prefix", "too-short", "too-long", "slash", "uppercase", "leading-dash"],
)
def test_desired_keys_parse_only_into_dns_label_names(
    key: str, expected: ReleaseKey | None
) -> None:
    assert logic.parse_desired_key(key) == expected


@pytest.mark.parametrize(
    ("change", "same_launch"),
    [
        ({"role": ReleaseRole.STABLE}, True),
        ({"saga_id": "default.flow.1.2"}, True),
        ({"spec_digest": "sha256:" + "b" * 64}, False),
        ({"revision": "1.0.1-g1"}, False),
        ({"replicas": 2}, False),
        ({"gpu_class": "a100"}, False),
        ({"llm": LlmConfig(base_url="http://llm/v1")}, False),
        ({"llm": LlmConfig(api_key_env="OTHER_KEY")}, False),
    ],
    ids=["role", "saga", "spec", "revision", "replicas", "gpu", "llm-url", "llm-key-var"],
)
def test_only_launch_fields_change_the_fingerprint(
    change: dict[str, object], same_launch: bool
) -> None:
    changed = DESIRED.model_copy(update=change)
    assert (logic.launch_fingerprint(changed) == FINGERPRINT) is same_launch


@pytest.mark.parametrize(
    ("desired", "found", "expected"),
    [
        (True, FoundRunner(alive=True, group_leader=True, healthy=True), Adoption.ADOPT),
        (True, FoundRunner(alive=True, group_leader=True, healthy=False), Adoption.KILL),
        (False, FoundRunner(alive=True, group_leader=True, healthy=True), Adoption.KILL),
        (True, FoundRunner(alive=False, group_leader=False, healthy=False), Adoption.FORGET),
        (False, FoundRunner(alive=False, group_leader=False, healthy=False), Adoption.FORGET),
        (True, FoundRunner(alive=True, group_leader=False, healthy=True), Adoption.FORGET),
        (False, FoundRunner(alive=True, group_leader=False, healthy=False), Adoption.FORGET),
    ],
    ids=[
        "desired-healthy",
        "desired-unhealthy",
        "stray",
        "dead",
        "dead-stray",
        "reused-pid-answering",
        "reused-pid",
    ],
)
def test_adoption_keeps_healthy_desired_runners_and_never_signals_foreign_pids(
    desired: bool, found: FoundRunner, expected: Adoption
) -> None:
    assert logic.adoption(desired=desired, found=found) is expected


OTHER = logic.launch_fingerprint(DESIRED.model_copy(update={"revision": "2.0.0-g1"}))
FAILED_HERE = Failure(fingerprint=FINGERPRINT, saga_id=DESIRED.saga_id, message="boom")


@pytest.mark.parametrize(
    ("desired", "failure", "runner", "expected"),
    [
        (None, None, RunnerView(FINGERPRINT, ready=True), Step.TEAR_DOWN),
        (None, None, None, Step.TEAR_DOWN),
        (DESIRED, None, None, Step.START),
        (DESIRED, None, RunnerView(FINGERPRINT, ready=False), Step.AWAIT_READY),
        (DESIRED, None, RunnerView(FINGERPRINT, ready=True), Step.SERVE),
        (DESIRED, None, RunnerView(OTHER, ready=True), Step.REPLACE),
        (DESIRED, FAILED_HERE, None, Step.HOLD_FAILED),
        (DESIRED.model_copy(update={"saga_id": "new"}), FAILED_HERE, None, Step.START),
        (DESIRED.model_copy(update={"revision": "9-g1"}), FAILED_HERE, None, Step.START),
        (
            DESIRED.model_copy(update={"role": ReleaseRole.STABLE}),
            FAILED_HERE,
            None,
            Step.HOLD_FAILED,
        ),
    ],
    ids=[
        "deleted-running",
        "deleted-idle",
        "nothing-runs",
        "starting",
        "ready",
        "other-launch",
        "failed",
        "failed-new-saga",
        "failed-new-revision",
        "failed-role-only",
    ],
)
def test_next_step(
    desired: DesiredRelease | None,
    failure: Failure | None,
    runner: RunnerView | None,
    expected: Step,
) -> None:
    assert logic.next_step(desired=desired, failure=failure, runner=runner) is expected


@pytest.mark.parametrize(
    ("failures", "expected"),
    [(1, 0.5), (2, 1.0), (3, 2.0), (5, 8.0), (6, 10.0), (5000, 10.0)],
    ids=["first", "second", "third", "fifth", "capped", "huge"],
)
def test_restart_delay_doubles_from_the_initial_delay_up_to_the_cap(
    failures: int, expected: float
) -> None:
    assert logic.restart_delay(failures_in_a_row=failures, initial_s=0.5, max_s=10.0) == expected


@pytest.mark.parametrize(
    ("previous", "served_s", "expected"),
    [(0, None, 1), (2, None, 3), (2, 5.0, 3), (4, 300.0, 1), (4, 1000.0, 1)],
    ids=["first", "never-ready", "short-life", "long-life", "longer-life"],
)
def test_a_long_healthy_life_starts_a_new_failure_streak(
    previous: int, served_s: float | None, expected: int
) -> None:
    assert (
        logic.failures_in_a_row(previous=previous, served_s=served_s, reset_after_s=300.0)
        == expected
    )


@pytest.mark.parametrize(
    ("failures", "max_restarts", "restart"),
    [(1, 3, True), (3, 3, True), (4, 3, False), (1, 0, False)],
    ids=["first", "last-allowed", "one-too-many", "never"],
)
def test_should_restart_allows_max_restarts_in_a_row(
    failures: int, max_restarts: int, restart: bool
) -> None:
    assert logic.should_restart(failures_in_a_row=failures, max_restarts=max_restarts) is restart


def test_spec_matches_checks_sha256_addresses_and_trusts_other_schemes() -> None:
    raw = b"spec"
    assert logic.spec_matches(digest=spec_digest(raw), raw=raw)
    assert not logic.spec_matches(digest=spec_digest(b"other"), raw=raw)
    assert logic.spec_matches(digest="md5:whatever", raw=raw)


def test_observed_records_carry_the_key_names_and_the_desired_saga_and_revision() -> None:
    record = logic.observed(
        key=ReleaseKey("default", "flow-g1"),
        desired=DESIRED,
        phase=ReleasePhase.READY,
        url="http://127.0.0.1:1234",
        pid=42,
        restarts=2,
    )
    assert (record.namespace, record.release) == ("default", "flow-g1")
    assert (record.saga_id, record.revision) == (DESIRED.saga_id, DESIRED.revision)
    assert (record.phase, record.url, record.pid, record.restarts) == (
        ReleasePhase.READY,
        "http://127.0.0.1:1234",
        42,
        2,
    )


def _failed_observed(**changes: object) -> ObservedRelease:
    values: dict[str, object] = {
        "namespace": "default",
        "release": "flow-g1",
        "revision": DESIRED.revision,
        "saga_id": DESIRED.saga_id,
        "phase": ReleasePhase.FAILED,
        "message": "spec missing",
    }
    values.update(changes)
    return ObservedRelease.model_validate(values)


@pytest.mark.parametrize(
    ("observed", "desired", "restored"),
    [
        (_failed_observed(), DESIRED, True),
        (_failed_observed(phase=ReleasePhase.READY), DESIRED, False),
        (_failed_observed(saga_id="older"), DESIRED, False),
        (_failed_observed(revision="0.9.0-g0"), DESIRED, False),
        (_failed_observed(), None, False),
        (None, DESIRED, False),
    ],
    ids=["same-record", "was-ready", "other-saga", "other-revision", "not-desired", "none"],
)
def test_a_failure_survives_a_restart_only_for_the_same_saga_and_revision(
    observed: ObservedRelease | None, desired: DesiredRelease | None, restored: bool
) -> None:
    failure = logic.restored_failure(observed=observed, desired=desired)
    assert (failure is not None) is restored
    if failure is not None:
        assert failure.message == "spec missing"
        assert logic.next_step(desired=DESIRED, failure=failure, runner=None) is Step.HOLD_FAILED
