"""Helpers of the installer's Helm backend tests: the fake helm's state and log, the
cluster played in the Kubernetes API emulator, and the documents a saga carries.

A module name of its own, so it never clashes with another test directory's helpers.
"""

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from plnt_common.errors import SpecNotFound
from plnt_common.events import RunSnapshot, SpecPulled
from plnt_common.releases import DesiredRelease, ReleaseRole, release_name, revision_label
from plnt_common.resources import PlntBackendSpec, WorkflowRunSpec
from plnt_common.workflow import spec_digest
from plnt_installer import logic
from plnt_testkit.kube_emulator import ResourceType

FAKE_HELM_DIR = Path(__file__).resolve().with_name("fake_helm")
CHART = Path(__file__).resolve().parents[2] / "charts" / "plnt-runner"

DEPLOYMENTS = ResourceType(
    group="apps",
    version="v1",
    plural="deployments",
    kind="Deployment",
    namespaced=True,
    status_subresource=True,
    custom=True,  # generation semantics, as the real API server keeps for Deployments
)
PODS = ResourceType(group="", version="v1", plural="pods", kind="Pod", namespaced=True)
SECRETS = ResourceType(group="", version="v1", plural="secrets", kind="Secret", namespaced=True)
CLUSTER_TYPES = (DEPLOYMENTS, PODS, SECRETS)

RUN_NS = "default"
RUN = "review-responder"
HELM_NS = "plnt-runners"
SECRETS_NS = "plnt-system"
IN_CLUSTER = "gpu-east"
REMOTE = "gpu-west"
SAGA = f"{RUN_NS}.{RUN}.1.1"
OWN = "own"
"""The fake helm's name for the cluster reached without --kubeconfig."""
RELEASE = release_name(RUN_NS, RUN, 1)

SPEC = b"""\
apiVersion: microagents.dev/v1
kind: Workflow
metadata:
  name: review-responder
  version: 1.2.0
spec:
  runtime:
    image: ghcr.io/microagents/runner:0.4.0
    entrypoint: python -m review_responder
  steps:
    - id: classify_intent
      tool: llm.classify
    - id: draft_reply
      tool: llm.generate
      deps: [classify_intent]
  requirements:
    gpuClass: h100
    gpuCount: 1
    memoryGiB: 16
"""
DIGEST = spec_digest(SPEC)

GPU_CLASSES = {
    "h100": {"resourceName": "nvidia.com/gpu", "nodeSelector": {"pool": "h100"}, "capacity": 8}
}


def in_cluster_backend(**kubernetes: Any) -> PlntBackendSpec:
    return PlntBackendSpec.model_validate(
        {
            "type": "kubernetes",
            "kubernetes": {"inCluster": True, "namespace": HELM_NS, **kubernetes},
            "gpuClasses": GPU_CLASSES,
            "llm": {"baseUrl": "https://llm.example.com/v1", "model": "small"},
        }
    )


def remote_backend(
    *, secret: str = "remote-kubeconfig", key: str = "config", **kubernetes: Any
) -> PlntBackendSpec:
    return PlntBackendSpec.model_validate(
        {
            "type": "kubernetes",
            "kubernetes": {
                "kubeconfigSecretRef": {"name": secret, "key": key},
                "namespace": HELM_NS,
                **kubernetes,
            },
            "gpuClasses": GPU_CLASSES,
        }
    )


def spec_pulled(
    *,
    backend_name: str = IN_CLUSTER,
    backend: PlntBackendSpec | None = None,
    generation: int = 1,
    gpu_class: str | None = "h100",
    node_selector: dict[str, str] | None = None,
) -> SpecPulled:
    run_spec = WorkflowRunSpec.model_validate(
        {
            "workflow": {"ref": "review-responder@1.2.0", "registry": "file:///registry"},
            "backend": {
                "cluster": backend_name,
                "gpuClass": gpu_class,
                "gpuCount": 1 if gpu_class else 0,
                "nodeSelector": node_selector or {"zone": "a"},
            },
            "replicas": {"min": 1, "max": 3},
        }
    )
    return SpecPulled(
        run=RunSnapshot(namespace=RUN_NS, name=RUN, generation=generation, spec=run_spec),
        spec_digest=DIGEST,
        workflow_name="review-responder",
        workflow_version="1.2.0",
        revision=revision_label("1.2.0", generation),
        backend_name=backend_name,
        backend=backend or in_cluster_backend(),
    )


def desired(pulled: SpecPulled, *, attempt: int = 1) -> DesiredRelease:
    run = pulled.run
    return logic.desired_canary(
        pulled, saga_id=f"{run.namespace}.{run.name}.{run.generation}.{attempt}"
    )


def promoted(release: DesiredRelease) -> DesiredRelease:
    return release.model_copy(update={"role": ReleaseRole.STABLE})


# --- the fake helm ------------------------------------------------------------------


@dataclass
class FakeHelm:
    """The state file the fake ``helm`` answers from, and the log it writes."""

    state_path: Path
    log_path: Path

    def _state(self) -> dict[str, Any]:
        if not self.state_path.exists():
            return {"clusters": {}, "failures": []}
        state: dict[str, Any] = json.loads(self.state_path.read_text())
        return state

    def _save(self, state: dict[str, Any]) -> None:
        self.state_path.write_text(json.dumps(state, indent=1))

    def seed(
        self,
        name: str,
        revisions: list[dict[str, Any]],
        namespace: str = HELM_NS,
        cluster: str = OWN,
    ) -> None:
        """Give release ``name`` these revisions (oldest first)."""
        state = self._state()
        releases = state.setdefault("clusters", {}).setdefault(cluster, {})
        releases[f"{namespace}/{name}"] = [
            {"updated": "2020-01-01T00:00:00.000000000Z", "description": "", **r} for r in revisions
        ]
        self._save(state)

    def fail_next(self, command: str, *, stderr: str, status: str | None = None) -> None:
        """Make the next ``command`` fail with ``stderr`` (recording a ``status`` revision)."""
        state = self._state()
        failure: dict[str, Any] = {"command": command, "stderr": stderr}
        if status:
            failure["status"] = status
        state.setdefault("failures", []).append(failure)
        self._save(state)

    def revisions(
        self, name: str, namespace: str = HELM_NS, cluster: str = OWN
    ) -> list[dict[str, Any]]:
        releases = self._state().get("clusters", {}).get(cluster, {})
        revisions: list[dict[str, Any]] = releases.get(f"{namespace}/{name}", [])
        return revisions

    def statuses(
        self, name: str, namespace: str = HELM_NS, cluster: str = OWN
    ) -> list[tuple[int, str]]:
        return [(r["revision"], r["status"]) for r in self.revisions(name, namespace, cluster)]

    def calls(self) -> list[dict[str, Any]]:
        """Every recorded invocation but ``helm version`` (pyhelm3's client check)."""
        if not self.log_path.exists():
            return []
        lines = self.log_path.read_text().splitlines()
        return [c for c in (json.loads(line) for line in lines) if c["command"] != "version"]

    def argv(self) -> list[list[str]]:
        return [call["argv"] for call in self.calls()]

    def forget(self) -> None:
        """Start a fresh log (state is kept)."""
        self.log_path.unlink(missing_ok=True)


def status(name: str, namespace: str = HELM_NS) -> list[str]:
    return ["status", name, "--output", "json", "--namespace", namespace]


def get_values(name: str, namespace: str = HELM_NS, revision: int | None = None) -> list[str]:
    tail = ["--revision", str(revision)] if revision is not None else []
    return ["get", "values", name, "--output", "json", *tail, "--namespace", namespace]


def history(name: str, namespace: str = HELM_NS) -> list[str]:
    return ["history", name, "--output", "json", "--max", "256", "--namespace", namespace]


def upgrade(name: str, description: str, namespace: str = HELM_NS) -> list[str]:
    return [
        "upgrade", name, str(CHART), "--history-max", "10", "--install", "--output", "json",
        "--timeout", "120s", "--values", "-", "--description", description,
        "--namespace", namespace, "--version", "0.1.0",
    ]  # fmt: skip


def rollback(name: str, revision: int, namespace: str = HELM_NS) -> list[str]:
    return [
        "rollback", name, str(revision), "--history-max", "10", "--timeout", "120s",
        "--namespace", namespace,
    ]  # fmt: skip


def uninstall(name: str, timeout: str = "120s", namespace: str = HELM_NS) -> list[str]:
    return ["uninstall", name, "--timeout", timeout, "--namespace", namespace, "--wait"]


def helm_list(namespace: str = HELM_NS) -> list[str]:
    return [
        "list", "--max", "256", "--output", "json", "--deployed", "--failed", "--pending",
        "--uninstalling", "--namespace", namespace,
    ]  # fmt: skip


def description(release: DesiredRelease) -> str:
    return f"plnt {release.saga_id}: {release.revision} as {release.role.value}"


# --- the cluster ----------------------------------------------------------------------


class FakeCluster:
    """Plays the cluster's controllers in the emulator: Deployments, pods and Secrets."""

    def __init__(self, api: client.ApiClient) -> None:
        self._api = api
        self._apps = client.AppsV1Api(api)
        self._core = client.CoreV1Api(api)

    def deployment(
        self,
        name: str,
        *,
        replicas: int = 1,
        ready: int = 0,
        updated: int | None = None,
        observed: bool = True,
        conditions: list[dict[str, Any]] | None = None,
        namespace: str = HELM_NS,
    ) -> None:
        """Create (or update) the release's Deployment and set its status."""
        labels = {"app.kubernetes.io/name": "plnt-runner", "app.kubernetes.io/instance": name}
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "runner", "image": "runner:1"}]},
                },
            },
        }
        current = self._read(name, namespace)
        if current is None:
            self._apps.create_namespaced_deployment(namespace, body)
        else:
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            self._apps.replace_namespaced_deployment(name, namespace, body)
        current = self._read(name, namespace)
        assert current is not None
        generation = int(current["metadata"]["generation"])
        current["status"] = {
            "observedGeneration": generation if observed else generation - 1,
            "replicas": replicas,
            "updatedReplicas": replicas if updated is None else updated,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "conditions": conditions or [],
        }
        self._apps.replace_namespaced_deployment_status(name, namespace, current)

    def pod(self, name: str, *, release: str, status: dict[str, Any]) -> None:
        labels = {"app.kubernetes.io/name": "plnt-runner", "app.kubernetes.io/instance": release}
        self._core.create_namespaced_pod(
            HELM_NS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": HELM_NS, "labels": labels},
                "spec": {"containers": [{"name": "runner", "image": "runner:1"}]},
                "status": status,
            },
        )

    def secret(self, name: str, data: dict[str, bytes], namespace: str = SECRETS_NS) -> None:
        encoded = {key: base64.b64encode(value).decode() for key, value in data.items()}
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "data": encoded,
        }
        try:
            self._core.create_namespaced_secret(namespace, body)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
            self._core.replace_namespaced_secret(name, namespace, body)

    def delete_deployment(self, name: str, namespace: str = HELM_NS) -> None:
        self._apps.delete_namespaced_deployment(name, namespace)

    def _read(self, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            response = self._apps.read_namespaced_deployment(
                name, namespace, _preload_content=False
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        body: dict[str, Any] = json.loads(response.data)
        return body


class StaticTargets:
    """``KubernetesTargets`` from a dict the test owns."""

    def __init__(self, backends: dict[str, PlntBackendSpec]) -> None:
        self.backends = backends

    async def all(self) -> dict[str, PlntBackendSpec]:
        return dict(self.backends)


class MemorySpecs:
    """``SpecSource`` from a dict the test owns."""

    def __init__(self, specs: dict[str, bytes]) -> None:
        self.specs = specs
        self.reads: list[str] = []

    async def get(self, digest: str) -> bytes:
        self.reads.append(digest)
        if digest not in self.specs:
            raise SpecNotFound(f"spec {digest} is not stored")
        return self.specs[digest]
