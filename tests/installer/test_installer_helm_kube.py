"""The Kubernetes side of the Helm backend against the API emulator: Deployment status
reads (``KubeDeployments``) and credentials (``KubeConnector``)."""

import stat
from pathlib import Path

import pytest
from installer_helm_support import HELM_NS, IN_CLUSTER, SECRETS_NS, FakeCluster, remote_backend
from kubernetes import config

from plnt_common.errors import BackendUnavailable
from plnt_installer.adapters.kube_access import KubeConnector
from plnt_installer.adapters.kube_errors import KubernetesUnavailable
from plnt_installer.adapters.kube_readiness import KubeDeployments
from plnt_installer.readiness import DeploymentState
from plnt_testkit.kube_emulator import KubeEmulator

NAME = "default-review-responder-g1"


def _kubeconfig_files(root: Path) -> list[Path]:
    """Kubeconfig files the connector wrote under ``root`` (sync: pathlib blocks)."""
    return sorted(root.glob("plnt-kubeconfigs-*/*.kubeconfig"))


def _connector_dirs(root: Path) -> list[Path]:
    return sorted(root.glob("plnt-kubeconfigs-*"))


@pytest.fixture
def deployments(own_kubeconfig: Path, cluster: FakeCluster) -> KubeDeployments:
    return KubeDeployments(api=config.new_client_from_config(config_file=str(own_kubeconfig)))


def _container(reason: str, message: str = "") -> dict[str, object]:
    waiting: dict[str, str] = {"reason": reason}
    if message:
        waiting["message"] = message
    return {
        "name": "runner",
        "image": "runner:1",
        "imageID": "",
        "ready": False,
        "restartCount": 3,
        "state": {"waiting": waiting},
    }


async def test_a_missing_deployment_reads_as_none(deployments: KubeDeployments) -> None:
    assert await deployments.get(namespace=HELM_NS, name=NAME) is None


async def test_a_ready_deployment_reports_its_counts_and_reads_no_pods(
    deployments: KubeDeployments, cluster: FakeCluster, emulator: KubeEmulator
) -> None:
    cluster.deployment(NAME, replicas=2, ready=2)
    served = len(emulator.served())

    state = await deployments.get(namespace=HELM_NS, name=NAME)

    assert state == DeploymentState(
        generation=1, observed_generation=1, desired=2, updated=2, ready=2
    )
    assert [s.path for s in emulator.served()[served:]] == [
        f"/apis/apps/v1/namespaces/{HELM_NS}/deployments/{NAME}"
    ]


async def test_a_deployment_not_ready_reports_why_its_pods_are_not_running(
    deployments: KubeDeployments, cluster: FakeCluster
) -> None:
    cluster.deployment(NAME, replicas=3, ready=0, updated=1, observed=False)
    cluster.pod(
        f"{NAME}-a",
        release=NAME,
        status={"phase": "Running", "containerStatuses": [_container("CrashLoopBackOff")]},
    )
    cluster.pod(
        f"{NAME}-b",
        release=NAME,
        status={
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                }
            ],
        },
    )
    cluster.pod(f"{NAME}-c", release=NAME, status={"phase": "Pending"})  # nothing to say yet
    cluster.pod("other-g1-a", release="other-g1", status={"phase": "Pending"})

    state = await deployments.get(namespace=HELM_NS, name=NAME)

    assert state == DeploymentState(
        generation=1,
        observed_generation=0,
        desired=3,
        updated=1,
        ready=0,
        pod_problems=(
            f"{NAME}-a: CrashLoopBackOff",
            f"{NAME}-b: Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        ),
    )


async def test_a_stalled_rollout_reports_the_progressing_reason(
    deployments: KubeDeployments, cluster: FakeCluster
) -> None:
    cluster.deployment(
        NAME,
        replicas=1,
        ready=0,
        conditions=[
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
        ],
    )

    state = await deployments.get(namespace=HELM_NS, name=NAME)

    assert state is not None
    assert state.progressing_reason == "ProgressDeadlineExceeded"


async def test_an_api_that_does_not_answer_is_a_retryable_error(
    deployments: KubeDeployments, emulator: KubeEmulator
) -> None:
    emulator.stop()

    with pytest.raises(KubernetesUnavailable, match=f"reading Deployment {HELM_NS}/{NAME}") as e:
        await deployments.get(namespace=HELM_NS, name=NAME)
    assert e.value.retryable


async def test_a_kubeconfig_secret_is_written_private_and_rewritten_when_it_rotates(
    cluster: FakeCluster, emulator: KubeEmulator, tmp_path: Path
) -> None:
    kube = KubeConnector(secrets_namespace=SECRETS_NS, temp_dir=tmp_path)
    target = remote_backend().kubernetes
    assert target is not None
    first = emulator.write_kubeconfig(tmp_path / "a").read_bytes()
    cluster.secret("remote-kubeconfig", {"config": first})

    connection = await kube.connect(backend_name="gpu-west", target=target)
    again = await kube.connect(backend_name="gpu-west", target=target)
    files = _kubeconfig_files(tmp_path)

    assert again.helm is connection.helm  # same Secret content: same files and clients
    assert len(files) == 1
    assert files[0].read_bytes() == first
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    assert stat.S_IMODE(files[0].parent.stat().st_mode) == 0o700
    assert connection.namespace == HELM_NS
    assert await connection.deployments.get(namespace=HELM_NS, name=NAME) is None

    rotated = first.replace(b"plnt-emulator", b"plnt-rotated")
    cluster.secret("remote-kubeconfig", {"config": rotated})
    after = await kube.connect(backend_name="gpu-west", target=target)

    assert after.helm is not connection.helm
    contents = sorted(path.read_bytes() for path in _kubeconfig_files(tmp_path))
    assert contents == sorted([first, rotated])  # the old file outlives in-flight commands
    await kube.close()
    assert _connector_dirs(tmp_path) == []


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (None, "Secret plnt-system/remote-kubeconfig: not found"),
        ({"other": b"x"}, "it has no key 'config'"),
        ({"config": b"not: [a kubeconfig"}, "is not a usable kubeconfig"),
    ],
    ids=["no-secret", "no-key", "not-a-kubeconfig"],
)
async def test_unusable_kubeconfig_secrets_are_not_retryable(
    cluster: FakeCluster, tmp_path: Path, data: dict[str, bytes] | None, match: str
) -> None:
    if data is not None:
        cluster.secret("remote-kubeconfig", data)
    kube = KubeConnector(secrets_namespace=SECRETS_NS, temp_dir=tmp_path)
    target = remote_backend().kubernetes
    assert target is not None

    with pytest.raises(BackendUnavailable, match=match) as refused:
        await kube.connect(backend_name="gpu-west", target=target)

    assert not refused.value.retryable
    assert _kubeconfig_files(tmp_path) == []
    await kube.close()


async def test_without_any_credentials_the_in_cluster_target_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubernetes.config import kube_config

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kube = KubeConnector(secrets_namespace=SECRETS_NS, temp_dir=tmp_path)
    target = remote_backend().kubernetes
    assert target is not None
    in_cluster = target.model_copy(update={"kubeconfig_secret_ref": None, "in_cluster": True})

    with pytest.raises(BackendUnavailable, match="the installer has no Kubernetes credentials"):
        await kube.connect(backend_name=IN_CLUSTER, target=in_cluster)
    await kube.close()
