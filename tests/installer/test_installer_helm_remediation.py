"""Pure decisions of the Helm backend: Flux-style remediation and Deployment readiness."""

import pytest

from plnt_installer.readiness import PROGRESS_DEADLINE_EXCEEDED, DeploymentState, judge
from plnt_installer.remediation import (
    HelmStatus,
    Remedy,
    Revision,
    last_deployed,
    needs_history,
    remediate,
)

S = HelmStatus


def _history(*statuses: HelmStatus) -> list[Revision]:
    return [Revision(number=i, status=s) for i, s in enumerate(statuses, start=1)]


# (current status or None, history statuses oldest first, age, expected remedy, rollback target)
REMEDIATION_TABLE = [
    (None, (), 999.0, Remedy.NONE, None),
    (S.DEPLOYED, (S.SUPERSEDED, S.DEPLOYED), 999.0, Remedy.NONE, None),
    (S.PENDING_INSTALL, (S.PENDING_INSTALL,), 999.0, Remedy.UNINSTALL, None),
    (S.PENDING_INSTALL, (S.PENDING_INSTALL,), 5.0, Remedy.WAIT, None),
    (S.PENDING_UPGRADE, (S.DEPLOYED, S.PENDING_UPGRADE), 999.0, Remedy.ROLLBACK, 1),
    (S.PENDING_UPGRADE, (S.DEPLOYED, S.PENDING_UPGRADE), 5.0, Remedy.WAIT, None),
    (S.PENDING_UPGRADE, (S.FAILED, S.PENDING_UPGRADE), 999.0, Remedy.UNINSTALL, None),
    (S.PENDING_ROLLBACK, (S.SUPERSEDED, S.FAILED, S.PENDING_ROLLBACK), 999.0, Remedy.ROLLBACK, 1),
    (S.FAILED, (S.FAILED,), 999.0, Remedy.UNINSTALL, None),
    (S.FAILED, (S.SUPERSEDED, S.DEPLOYED, S.FAILED), 999.0, Remedy.ROLLBACK, 2),
    (S.FAILED, (S.DEPLOYED, S.FAILED), 1.0, Remedy.ROLLBACK, 1),
    (S.UNINSTALLING, (S.UNINSTALLING,), 999.0, Remedy.UNINSTALL, None),
    (S.UNINSTALLED, (S.UNINSTALLED,), 999.0, Remedy.UNINSTALL, None),
    (S.UNKNOWN, (S.DEPLOYED, S.UNKNOWN), 999.0, Remedy.ROLLBACK, 1),
]
REMEDIATION_IDS = [
    "absent-installs",
    "deployed-upgrades",
    "stuck-pending-install-uninstalls",
    "young-pending-install-waits",
    "stuck-pending-upgrade-rolls-back-to-last-deployed",
    "young-pending-upgrade-waits",
    "pending-upgrade-with-nothing-deployed-uninstalls",
    "stuck-pending-rollback-rolls-back-to-last-superseded",
    "failed-install-uninstalls",
    "failed-upgrade-rolls-back-to-the-deployed-one",
    "failed-is-never-waited-for",
    "stuck-uninstalling-finishes-the-uninstall",
    "uninstalled-with-kept-history-is-purged",
    "unknown-is-treated-as-failed",
]


@pytest.mark.parametrize(
    ("status", "statuses", "age_s", "remedy", "rollback_to"),
    REMEDIATION_TABLE,
    ids=REMEDIATION_IDS,
)
def test_remediate_picks_the_flux_remedy_for_each_release_state(
    status: HelmStatus | None,
    statuses: tuple[HelmStatus, ...],
    age_s: float,
    remedy: Remedy,
    rollback_to: int | None,
) -> None:
    history = _history(*statuses)
    current = Revision(number=len(history), status=status) if status else None

    decision = remediate(current=current, history=history, age_s=age_s, pending_grace_s=30.0)

    assert (decision.remedy, decision.rollback_to) == (remedy, rollback_to)
    assert decision.reason


def test_last_deployed_skips_failed_and_pending_revisions_and_the_current_one() -> None:
    history = _history(S.SUPERSEDED, S.FAILED, S.SUPERSEDED, S.PENDING_UPGRADE, S.DEPLOYED)

    assert last_deployed(history, before=5) == 3
    assert last_deployed(history, before=3) == 1
    assert last_deployed(history[1:2], before=9) is None


@pytest.mark.parametrize(
    ("status", "needed"),
    [
        (S.DEPLOYED, False),
        (S.PENDING_INSTALL, False),
        (S.UNINSTALLING, False),
        (S.PENDING_UPGRADE, True),
        (S.PENDING_ROLLBACK, True),
        (S.FAILED, True),
        (S.UNKNOWN, True),
    ],
    ids=lambda v: str(v),
)
def test_history_is_read_only_when_the_remedy_depends_on_it(
    status: HelmStatus, needed: bool
) -> None:
    assert needs_history(status) is needed


def test_a_status_helm_may_add_later_reads_as_unknown() -> None:
    assert HelmStatus.parse("Deployed") is S.DEPLOYED
    assert HelmStatus.parse("pending-something-new") is S.UNKNOWN


def _state(**fields: object) -> DeploymentState:
    values: dict[str, object] = {
        "generation": 2,
        "observed_generation": 2,
        "desired": 2,
        "updated": 2,
        "ready": 2,
    }
    values.update(fields)
    return DeploymentState(**values)  # type: ignore[arg-type]


READINESS_TABLE = [
    (None, False, False, "Deployment not found"),
    (_state(), True, False, "readyReplicas 2/2"),
    (_state(ready=5), True, False, "readyReplicas 5/2"),
    (
        _state(observed_generation=1),
        False,
        False,
        "generation 2 not observed yet (observedGeneration 1), readyReplicas 2/2",
    ),
    (_state(updated=1), False, False, "updatedReplicas 1/2, readyReplicas 2/2"),
    (_state(ready=0), False, False, "readyReplicas 0/2"),
    (
        _state(ready=0, pod_problems=("runner-a: ImagePullBackOff: no such image",)),
        False,
        False,
        "readyReplicas 0/2; pods: runner-a: ImagePullBackOff: no such image",
    ),
    (
        _state(ready=1, progressing_reason=PROGRESS_DEADLINE_EXCEEDED),
        False,
        True,
        "rollout exceeded its progress deadline, readyReplicas 1/2",
    ),
    (_state(desired=0, updated=0, ready=0), True, False, "readyReplicas 0/0"),
]


@pytest.mark.parametrize(
    ("state", "ready", "failed", "message"),
    READINESS_TABLE,
    ids=[
        "absent",
        "all-ready",
        "more-ready-than-desired-while-scaling-down",
        "spec-not-observed",
        "old-template-replicas-left",
        "none-ready",
        "pod-waiting-reason-named",
        "progress-deadline-exceeded-fails",
        "zero-replicas-is-ready",
    ],
)
def test_judge_reads_deployment_status_like_kubectl_rollout_status(
    state: DeploymentState | None, ready: bool, failed: bool, message: str
) -> None:
    verdict = judge(state)

    assert (verdict.ready, verdict.failed, verdict.message) == (ready, failed, message)
