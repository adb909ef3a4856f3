"""Fixtures of the installer's Helm backend tests: the recording fake ``helm`` first on
PATH, a Kubernetes API emulator serving Deployments, pods and Secrets as the target
cluster (and the installer's own), and the backend wired to both.

Nothing of the backend is mocked: pyhelm3 runs the fake ``helm`` as a subprocess, and
the ``kubernetes`` client talks HTTP to the emulator.
"""

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from installer_helm_support import (
    CLUSTER_TYPES,
    DIGEST,
    FAKE_HELM_DIR,
    IN_CLUSTER,
    REMOTE,
    SECRETS_NS,
    SPEC,
    FakeCluster,
    FakeHelm,
    MemorySpecs,
    StaticTargets,
    in_cluster_backend,
    remote_backend,
)
from kubernetes import config
from kubernetes.config import kube_config

from plnt_installer.adapters.helm.backend import HelmReleaseBackend
from plnt_installer.adapters.kube_access import KubeConnector
from plnt_testkit.kube_emulator import KubeEmulator

CHART = Path(__file__).resolve().parents[2] / "charts" / "plnt-runner"


@pytest.fixture
def fake_helm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHelm:
    """The recording ``helm`` first on PATH, with an empty state."""
    monkeypatch.setenv("PATH", f"{FAKE_HELM_DIR}{os.pathsep}{os.environ.get('PATH', '')}")
    helm = FakeHelm(state_path=tmp_path / "helm-state.json", log_path=tmp_path / "helm.jsonl")
    monkeypatch.setenv("FAKE_HELM_STATE", str(helm.state_path))
    monkeypatch.setenv("FAKE_HELM_LOG", str(helm.log_path))
    return helm


@pytest.fixture
def emulator() -> Iterator[KubeEmulator]:
    with KubeEmulator(types=CLUSTER_TYPES) as server:
        yield server


@pytest.fixture
def own_kubeconfig(emulator: KubeEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The installer's own credentials (KUBECONFIG), pointing at the emulator."""
    path = emulator.write_kubeconfig(tmp_path / "own-kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(path))  # what helm, a subprocess, reads
    # the kubernetes client read KUBECONFIG once, when it was imported
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    return path


@pytest.fixture
def cluster(own_kubeconfig: Path) -> Iterator[FakeCluster]:
    api = config.new_client_from_config(config_file=str(own_kubeconfig))
    yield FakeCluster(api)
    api.close()


@pytest.fixture
def remote_kubeconfig(emulator: KubeEmulator, cluster: FakeCluster, tmp_path: Path) -> bytes:
    """A kubeconfig for the "remote" PlntBackend, stored in a Secret the installer reads.

    The remote cluster is the same emulator reached as ``localhost`` (``REMOTE_SERVER``),
    which the fake helm keeps releases apart for: what matters is the path the
    credentials take.
    """
    path = emulator.write_kubeconfig(tmp_path / "remote-kubeconfig")
    text = path.read_bytes().replace(b"http://127.0.0.1:", b"http://localhost:")
    cluster.secret("remote-kubeconfig", {"config": text}, namespace=SECRETS_NS)
    return text


@pytest.fixture
def remote_server(emulator: KubeEmulator) -> str:
    """The fake helm's name for the remote PlntBackend's cluster."""
    return f"http://localhost:{emulator.port}"


@pytest.fixture
def targets() -> StaticTargets:
    return StaticTargets({IN_CLUSTER: in_cluster_backend(), REMOTE: remote_backend()})


@pytest.fixture
def specs() -> MemorySpecs:
    return MemorySpecs({DIGEST: SPEC})


@pytest.fixture
async def connector(tmp_path: Path, own_kubeconfig: Path) -> AsyncIterator[KubeConnector]:
    kube = KubeConnector(secrets_namespace=SECRETS_NS, temp_dir=tmp_path)
    yield kube
    await kube.close()


@pytest.fixture
def helm_backend(
    fake_helm: FakeHelm, targets: StaticTargets, specs: MemorySpecs, connector: KubeConnector
) -> HelmReleaseBackend:
    return HelmReleaseBackend(
        targets=targets,
        specs=specs,
        connector=connector,
        chart=CHART,
        poll_s=0.05,
        pending_grace_s=30.0,
    )
