"""``HelmReleaseBackend`` against the recording fake ``helm`` and the Kubernetes emulator.

Each test pins the exact helm commands an operation issues and the release states it
leaves behind; readiness is read from Deployments the test writes into the emulator, as
the cluster's controllers would.
"""

import asyncio
import stat
from pathlib import Path
from typing import Any

import pytest
from installer_helm_support import (
    CHART,
    DIGEST,
    HELM_NS,
    IN_CLUSTER,
    RELEASE,
    REMOTE,
    RUN,
    RUN_NS,
    SAGA,
    FakeCluster,
    FakeHelm,
    MemorySpecs,
    StaticTargets,
    description,
    desired,
    get_values,
    helm_list,
    history,
    in_cluster_backend,
    promoted,
    remote_backend,
    rollback,
    spec_pulled,
    status,
    uninstall,
    upgrade,
)

from plnt_common.errors import BackendUnavailable, InstallFailed
from plnt_common.releases import ObservedRelease, ReleasePhase, ReleaseRole, release_name
from plnt_installer.adapters.helm.backend import HelmReleaseBackend
from plnt_installer.adapters.kube_access import KubeConnector
from plnt_installer.adapters.kube_errors import ReleaseBusy
from plnt_installer.ports import ReleasesUnreadable

URL = f"http://{RELEASE}.{HELM_NS}.svc.cluster.local:80"


async def _install_canary(backend: HelmReleaseBackend, fake_helm: FakeHelm) -> Any:
    """Install the generation-1 canary onto its PlntBackend; the log starts after it."""
    pulled = spec_pulled()
    release = desired(pulled)
    await backend.install(release, pulled=pulled)
    fake_helm.forget()
    return release


async def test_install_of_a_new_release_checks_status_then_upgrades_with_install(
    helm_backend: HelmReleaseBackend, fake_helm: FakeHelm, specs: MemorySpecs
) -> None:
    pulled = spec_pulled()
    release = desired(pulled)

    await helm_backend.install(release, pulled=pulled)

    assert fake_helm.argv() == [status(RELEASE), upgrade(RELEASE, description(release))]
    assert fake_helm.statuses(RELEASE) == [(1, "deployed")]
    values = fake_helm.calls()[-1]["values"]
    assert values["role"] == "canary"
    assert values["workflowRun"] == {"name": RUN}
    assert values["specDigest"] == DIGEST
    assert values["gpu"] == {
        "resourceName": "nvidia.com/gpu",
        "count": 1,
        "nodeSelector": {"pool": "h100"},
    }
    assert values["nodeSelector"] == {"zone": "a"}
    assert values["replicas"] == {"min": 1, "max": 3}
    assert specs.reads == [DIGEST]
    assert fake_helm.calls()[-1]["kubeconfig"] is None  # in-cluster: Helm resolves it itself


async def test_promotion_upgrades_with_the_recorded_values_and_only_the_role_changed(
    helm_backend: HelmReleaseBackend, fake_helm: FakeHelm, specs: MemorySpecs
) -> None:
    release = await _install_canary(helm_backend, fake_helm)
    installed = fake_helm.revisions(RELEASE)[-1]["values"]
    specs.reads.clear()

    # the handlers promote without a spec.pulled: the backend finds the release itself
    await helm_backend.install(promoted(release))

    stable = promoted(release)
    assert fake_helm.argv() == [
        status(RELEASE),  # locate: is it on gpu-east?
        get_values(RELEASE),
        status(RELEASE),  # observe before acting
        get_values(RELEASE),
        upgrade(RELEASE, description(stable)),
    ]
    assert fake_helm.statuses(RELEASE) == [(1, "superseded"), (2, "deployed")]
    assert fake_helm.revisions(RELEASE)[-1]["values"] == {**installed, "role": "stable"}
    assert specs.reads == []  # nothing re-rendered: the pod-shaping values stay as they are
    listed = await helm_backend.releases(namespace=RUN_NS, run_name=RUN)
    assert [(r.release, r.role) for r in listed] == [(RELEASE, ReleaseRole.STABLE)]


async def test_install_of_identical_values_issues_no_upgrade(
    helm_backend: HelmReleaseBackend, fake_helm: FakeHelm
) -> None:
    pulled = spec_pulled()
    release = await _install_canary(helm_backend, fake_helm)

    await helm_backend.install(release, pulled=pulled)  # a redelivered spec.pulled

    assert fake_helm.argv() == [status(RELEASE), get_values(RELEASE)]
    assert fake_helm.statuses(RELEASE) == [(1, "deployed")]


async def test_a_release_stuck_in_pending_install_is_uninstalled_then_installed(
    helm_backend: HelmReleaseBackend, fake_helm: FakeHelm
) -> None:
    pulled = spec_pulled()
    release = desired(pulled)
    await helm_backend.install(release, pulled=pulled)
    values = fake_helm.revisions(RELEASE)[-1]["values"]
    fake_helm.seed(RELEASE, [{"revision": 1, "status": "pending-install", "values": values}])
    fake_helm.forget()

    await helm_backend.install(release, pulled=pulled)

    assert fake_helm.argv() == [
        status(RELEASE),
        get_values(RELEASE),
        uninstall(RELEASE),
        upgrade(RELEASE, description(release)),
    ]
    assert fake_helm.statuses(RELEASE) == [(1, "deployed")]


async def test_a_release_stuck_in_pending_upgrade_is_rolled_back_then_upgraded(
    helm_backend: HelmReleaseBackend, fake_helm: FakeHelm
) -> None:
    pulled = spec_pulled()
    release = desired(pulled)
    await helm_backend.install(release, pulled=pulled)
    values = fake_helm.revisions(RELEASE)[-1]["values"]
    fake_helm.seed(
        RELEASE,
        [
            {"revision": 1, "status": "superseded", "values": values},
            {"revision": 2, "status": "deployed", "values": values},
            {"revision": 3, "status": "pending-upgrade", "values": {**values, "role": "stable"}},
        ],
    )
    fake_helm.forget()

    await helm_backend.install(release, pulled=pulled)

    assert fake_helm.argv() == [
        status(RELEASE),
        get_values(RELEASE),
        history(RELEASE),
        rollback(RELEASE, 2),
        get_values(RELEASE),
        upgrade(RELEASE, description(release)),
    ]
    assert fake_helm.statuses(RELEASE) == [
        (1, "superseded"),
        (2, "superseded"),
        (3, "superseded"),
        (4, "superseded"),  # the rollback to 2
        (5, "deployed"),
    ]


async def test_a_failed_upgrade_is_rolled_back_and_a_failed_install_is_uninstalled(
    helm_backend: HelmReleaseBackend, fake_helm: FakeHelm
) -> None:
    pulled = spec_pulled()
    release = desired(pulled)
    await helm_backend.install(release, pulled=pulled)
    values = fake_helm.revisions(RELEASE)[-1]["values"]

    fake_helm.seed(
        RELEASE,
        [
            {"revision": 1, "status": "deployed", "values": values},
            {"revision": 2, "status": "failed", "values": values},
        ],
    )
    fake_helm.forget()
    await helm_backend.install(release, pulled=pulled)
    assert fake_helm.argv() == [
        status(RELEASE),
        get_values(RELEASE),
        history(RELEASE),
        rollback(RELEASE, 1),
        get_values(RELEASE),
        upgrade(RELEASE, description(release)),
    ]

    fake_helm.seed(RELEASE, [{"revision": 1, "status": "failed", "values": values}])
    fake_helm.forget()
    await helm_backend.install(release, pulled=pulled)
    assert fake_helm.argv() == [
        status(RELEASE),
        get_values(RELEASE),
        history(RELEASE),
        uninstall(RELEASE),
        upgrade(RELEASE, description(release)),
    ]
    assert fake_helm.statuses(RELEASE) == [(1, "deployed")]


async def test_a_young_pending_operation_is_left_alone_and_reported_as_busy(
    helm_backend: HelmReleaseBackend, fake_helm: FakeHelm
) -> None:
    pulled = spec_pulled()
    release = desired(pulled)
    await helm_backend.install(release, pulled=pulled)
    revision = fake_helm.revisions(RELEASE)[-1]
    fake_helm.seed(RELEASE, [{**revision, "status": "pending-install"}])  # written just now
    fake_helm.forget()

    # the age is whole seconds since the seed: 0, or 1 on a busy machine
    with pytest.raises(
        ReleaseBusy, match=r"pending-install for [01]s, within the 30s grace"
    ) as busy:
        await helm_backend.install(release, pulled=pulled)

    assert busy.value.retryable
    assert fake_helm.argv() == [status(RELEASE), get_values(RELEASE)]


async def test_a_release_of_the_same_name_from_another_namespace_is_not_overwritten(
    helm_backend: HelmReleaseBackend, fake_helm: FakeHelm
) -> None:
    pulled = spec_pulled()
    await helm_backend.install(desired(pulled), pulled=pulled)
    theirs = fake_helm.revisions(RELEASE)[-1]["values"]
    theirs["service"]["annotations"]["plnt.work/namespace"] = "team-b"
    fake_helm.seed(RELEASE, [{"revision": 1, "status": "deployed", "values": theirs}])

    with pytest.raises(InstallFailed, match=f"{HELM_NS}/{RELEASE} .* belongs to team-b/{RUN}"):
        await helm_backend.install(desired(pulled), pulled=pulled)
    assert await helm_backend.uninstall(namespace=RUN_NS, release=RELEASE, timeout_s=5) is False
    assert await helm_backend.releases(namespace=RUN_NS, run_name=RUN) == []
    assert fake_helm.statuses(RELEASE) == [(1, "deployed")]


async def test_a_gpu_class_the_backend_does_not_offer_fails_before_any_helm_command(
    helm_backend: HelmReleaseBackend, fake_helm: FakeHelm
) -> None:
    pulled = spec_pulled(gpu_class="a100")

    with pytest.raises(BackendUnavailable, match="does not offer gpuClass 'a100'"):
        await helm_backend.install(desired(pulled), pulled=pulled)
    assert fake_helm.calls() == []


async def test_a_chart_helm_cannot_render_fails_the_install_without_retry(
    helm_backend: HelmReleaseBackend, fake_helm: FakeHelm
) -> None:
    fake_helm.fail_next(
        "upgrade", stderr="Error: UPGRADE FAILED: execution error at (plnt-runner/x): bad"
    )
    pulled = spec_pulled()

    with pytest.raises(InstallFailed, match="execution error") as failed:
        await helm_backend.install(desired(pulled), pulled=pulled)
    assert not failed.value.retryable


async def test_an_unreachable_cluster_is_a_retryable_error(
    helm_backend: HelmReleaseBackend, fake_helm: FakeHelm
) -> None:
    fake_helm.fail_next(
        "status", stderr="Error: Kubernetes cluster unreachable: dial tcp: connection refused"
    )
    pulled = spec_pulled()

    with pytest.raises(BackendUnavailable, match="cluster unreachable") as down:
        await helm_backend.install(desired(pulled), pulled=pulled)
    assert down.value.retryable


async def test_wait_ready_polls_the_deployment_until_every_replica_is_ready(
    helm_backend: HelmReleaseBackend, fake_helm: FakeHelm, cluster: FakeCluster
) -> None:
    pulled = spec_pulled()
    await helm_backend.install(desired(pulled), pulled=pulled)
    cluster.deployment(RELEASE, replicas=1, ready=0)
    waiting = asyncio.create_task(
        helm_backend.wait_ready(
            pulled=pulled, namespace=RUN_NS, release=RELEASE, saga_id=SAGA, timeout_s=10
        )
    )
    await asyncio.sleep(0.3)
    assert not waiting.done()

    await asyncio.to_thread(cluster.deployment, RELEASE, replicas=1, ready=1)

    observed = await asyncio.wait_for(waiting, timeout=5)
    assert observed == ObservedRelease(
        namespace=RUN_NS,
        release=RELEASE,
        run_name=RUN,
        revision="1.2.0-g1",
        saga_id=SAGA,
        phase=ReleasePhase.READY,
        url=URL,
        message="readyReplicas 1/1",
    )


async def test_wait_ready_times_out_naming_the_release_and_the_pod_waiting_reason(
    helm_backend: HelmReleaseBackend, fake_helm: FakeHelm, cluster: FakeCluster
) -> None:
    pulled = spec_pulled()
    await helm_backend.install(desired(pulled), pulled=pulled)
    cluster.deployment(RELEASE, replicas=1, ready=0)
    cluster.pod(
        f"{RELEASE}-7d9f-x2",
        release=RELEASE,
        status={
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "runner",
                    "image": "runner:1",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}},
                }
            ],
        },
    )

    with pytest.raises(InstallFailed) as failed:
        await helm_backend.wait_ready(
            pulled=pulled, namespace=RUN_NS, release=RELEASE, saga_id=SAGA, timeout_s=0.5
        )

    assert str(failed.value) == (
        f"release {HELM_NS}/{RELEASE} on PlntBackend {IN_CLUSTER} was not ready after 0.5s "
        f"(readyReplicas 0/1; pods: {RELEASE}-7d9f-x2: ImagePullBackOff: not found)"
    )


async def test_wait_ready_fails_at_once_for_another_saga_or_a_missing_release(
    helm_backend: HelmReleaseBackend, fake_helm: FakeHelm
) -> None:
    pulled = spec_pulled()
    with pytest.raises(InstallFailed, match="is not installed on PlntBackend gpu-east"):
        await helm_backend.wait_ready(
            pulled=pulled, namespace=RUN_NS, release=RELEASE, saga_id=SAGA, timeout_s=30
        )

    await helm_backend.install(desired(pulled), pulled=pulled)
    with pytest.raises(InstallFailed, match=f"desired by saga {SAGA}, not other-saga"):
        await helm_backend.wait_ready(
            pulled=pulled, namespace=RUN_NS, release=RELEASE, saga_id="other-saga", timeout_s=30
        )


async def test_status_follows_the_deployment_from_starting_to_ready(
    helm_backend: HelmReleaseBackend, fake_helm: FakeHelm, cluster: FakeCluster
) -> None:
    assert await helm_backend.status(namespace=RUN_NS, release=RELEASE) is None
    pulled = spec_pulled()
    await helm_backend.install(desired(pulled), pulled=pulled)

    starting = await helm_backend.status(namespace=RUN_NS, release=RELEASE)
    assert starting is not None
    assert (starting.phase, starting.message) == (ReleasePhase.STARTING, "Deployment not found")

    cluster.deployment(RELEASE, replicas=2, ready=2)
    ready = await helm_backend.status(namespace=RUN_NS, release=RELEASE)
    assert ready is not None
    assert (ready.phase, ready.url, ready.saga_id) == (ReleasePhase.READY, URL, SAGA)


async def test_a_release_is_called_under_its_backend_s_service_domain(
    helm_backend: HelmReleaseBackend, cluster: FakeCluster, targets: StaticTargets
) -> None:
    targets.backends[IN_CLUSTER] = in_cluster_backend(serviceDomain="svc.clusterset.local")
    pulled = spec_pulled(backend=targets.backends[IN_CLUSTER])
    await helm_backend.install(desired(pulled), pulled=pulled)
    cluster.deployment(RELEASE, replicas=1, ready=1)

    ready = await helm_backend.wait_ready(
        pulled=pulled, namespace=RUN_NS, release=RELEASE, saga_id=SAGA, timeout_s=5
    )
    assert ready.url == f"http://{RELEASE}.{HELM_NS}.svc.clusterset.local:80"


async def test_uninstall_removes_a_release_and_reports_a_missing_one(
    helm_backend: HelmReleaseBackend,
    fake_helm: FakeHelm,
    remote_kubeconfig: bytes,
    remote_server: str,
) -> None:
    await _install_canary(helm_backend, fake_helm)

    assert await helm_backend.uninstall(namespace=RUN_NS, release=RELEASE, timeout_s=30) is True
    assert fake_helm.argv() == [
        status(RELEASE),  # found on gpu-east, the first PlntBackend by name
        get_values(RELEASE),
        uninstall(RELEASE, timeout="30s"),
    ]
    assert fake_helm.revisions(RELEASE) == []
    fake_helm.forget()

    assert await helm_backend.uninstall(namespace=RUN_NS, release=RELEASE, timeout_s=30) is False
    # looked on both PlntBackends' clusters, the remote one with its kubeconfig; removed nothing
    looked = [(call["argv"][:6], call["cluster"]) for call in fake_helm.calls()]
    assert looked == [(status(RELEASE), "own"), (status(RELEASE), remote_server)]
    assert fake_helm.calls()[1]["argv"][6] == "--kubeconfig"


async def test_releases_lists_canary_and_stable_of_the_run_across_backends(
    helm_backend: HelmReleaseBackend,
    fake_helm: FakeHelm,
    remote_kubeconfig: bytes,
    remote_server: str,
) -> None:
    stable_pulled = spec_pulled()
    await helm_backend.install(promoted(desired(stable_pulled)), pulled=stable_pulled)
    canary_pulled = spec_pulled(generation=2, backend_name=REMOTE, backend=remote_backend())
    await helm_backend.install(desired(canary_pulled), pulled=canary_pulled)
    fake_helm.seed("other-run-g1", [{"revision": 1, "status": "deployed", "values": {}}])
    fake_helm.forget()

    listed = await helm_backend.releases(namespace=RUN_NS, run_name=RUN)

    assert [(r.release, r.role, r.saga_id) for r in listed] == [
        (RELEASE, ReleaseRole.STABLE, SAGA),
        (release_name(RUN_NS, RUN, 2), ReleaseRole.CANARY, f"{RUN_NS}.{RUN}.2.1"),
    ]
    assert fake_helm.statuses(release_name(RUN_NS, RUN, 2), cluster=remote_server) == [
        (1, "deployed")
    ]
    lists = [call for call in fake_helm.calls() if call["command"] == "list"]
    assert [(call["argv"][: len(helm_list())], call["cluster"]) for call in lists] == [
        (helm_list(), "own"),
        (helm_list(), remote_server),
    ]
    assert await helm_backend.releases(namespace="team-b", run_name=RUN) == []


async def test_a_silent_cluster_does_not_hide_the_run_s_releases_on_the_others(
    helm_backend: HelmReleaseBackend, fake_helm: FakeHelm, remote_kubeconfig: bytes
) -> None:
    stable_pulled = spec_pulled()
    await helm_backend.install(promoted(desired(stable_pulled)), pulled=stable_pulled)
    canary_pulled = spec_pulled(generation=2, backend_name=REMOTE, backend=remote_backend())
    await helm_backend.install(desired(canary_pulled), pulled=canary_pulled)
    # the in-cluster PlntBackend's API is away when the run's releases are listed
    fake_helm.fail_next(
        "list", stderr="Error: Kubernetes cluster unreachable: dial tcp: connection refused"
    )

    with pytest.raises(ReleasesUnreadable) as silent:
        await helm_backend.releases(namespace=RUN_NS, run_name=RUN)

    assert silent.value.retryable
    assert silent.value.backends == (IN_CLUSTER,)
    assert [r.release for r in silent.value.found] == [release_name(RUN_NS, RUN, 2)]
    assert f"the API of PlntBackend {IN_CLUSTER!r} did not answer" in str(silent.value)


async def test_a_kubeconfig_secret_reaches_helm_as_a_private_file_and_the_api_client(
    helm_backend: HelmReleaseBackend,
    fake_helm: FakeHelm,
    cluster: FakeCluster,
    remote_kubeconfig: bytes,
    tmp_path: Path,
) -> None:
    pulled = spec_pulled(backend_name=REMOTE, backend=remote_backend())

    await helm_backend.install(desired(pulled), pulled=pulled)
    cluster.deployment(RELEASE, replicas=1, ready=1)
    observed = await helm_backend.wait_ready(
        pulled=pulled, namespace=RUN_NS, release=RELEASE, saga_id=SAGA, timeout_s=5
    )

    assert observed.phase is ReleasePhase.READY
    for call in fake_helm.calls():
        kubeconfig = call["kubeconfig"]
        assert call["argv"][-2] == "--kubeconfig"
        assert kubeconfig["content"] == remote_kubeconfig.decode()
        assert kubeconfig["mode"] == oct(stat.S_IRUSR | stat.S_IWUSR)
        assert Path(kubeconfig["path"]).parent.parent == tmp_path
    upgrades = [call["argv"][:-2] for call in fake_helm.calls() if call["command"] == "upgrade"]
    assert upgrades == [upgrade(RELEASE, description(desired(pulled)))]


async def test_a_missing_kubeconfig_secret_skips_that_backend_when_searching(
    helm_backend: HelmReleaseBackend, fake_helm: FakeHelm, targets: StaticTargets
) -> None:
    targets.backends[REMOTE] = remote_backend(secret="absent")
    release = await _install_canary(helm_backend, fake_helm)

    listed = await helm_backend.releases(namespace=RUN_NS, run_name=RUN)
    assert [r.release for r in listed] == [release.release]

    pulled = spec_pulled(backend_name=REMOTE, backend=remote_backend(secret="absent"))
    with pytest.raises(BackendUnavailable, match="Secret plnt-system/absent: not found"):
        await helm_backend.install(desired(pulled), pulled=pulled)


async def test_a_first_install_without_its_spec_pulled_is_refused(
    helm_backend: HelmReleaseBackend, fake_helm: FakeHelm
) -> None:
    with pytest.raises(BackendUnavailable, match=r"a first install must pass its spec\.pulled"):
        await helm_backend.install(desired(spec_pulled()))
    assert all(call["command"] == "status" for call in fake_helm.calls())


async def test_a_missing_helm_executable_is_reported_as_such(
    helm_backend: HelmReleaseBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    pulled = spec_pulled()

    with pytest.raises(BackendUnavailable, match="helm executable 'helm' is not on PATH"):
        await helm_backend.install(desired(pulled), pulled=pulled)


async def test_the_saga_id_and_role_of_a_release_are_read_from_helm_alone(
    helm_backend: HelmReleaseBackend, specs: MemorySpecs, connector: KubeConnector
) -> None:
    """A restarted installer (a new backend object, no memory) sees the same releases."""
    pulled = spec_pulled()
    await helm_backend.install(desired(pulled), pulled=pulled)
    restarted = HelmReleaseBackend(
        targets=StaticTargets({IN_CLUSTER: pulled.backend}),
        specs=specs,
        connector=connector,
        chart=CHART,
    )

    assert await restarted.releases(namespace=RUN_NS, run_name=RUN) == [desired(pulled)]


async def test_a_release_an_older_plnt_named_without_the_namespace_is_still_the_run_s(
    helm_backend: HelmReleaseBackend, fake_helm: FakeHelm
) -> None:
    """Releases were ``<run>-g<generation>`` before names carried the namespace: after an
    upgrade, the run's next promotion or deletion must still find (and retire) them."""
    pulled = spec_pulled()
    await helm_backend.install(promoted(desired(pulled)), pulled=pulled)
    values = fake_helm.revisions(RELEASE)[-1]["values"]
    legacy = f"{RUN}-g1"
    fake_helm.seed(legacy, [{"revision": 1, "status": "deployed", "values": values}])

    listed = await helm_backend.releases(namespace=RUN_NS, run_name=RUN)

    assert sorted(r.release for r in listed) == sorted([RELEASE, legacy])
    assert await helm_backend.releases(namespace="team-b", run_name=RUN) == []
