"""A PlntBackend's spec.runnerPod reaches every runner pod: the values the installer
computes (``chart_values``) rendered with the real ``charts/plnt-runner`` and validated
as Kubernetes, with plnt's own pod labels and annotations winning a clash."""

from typing import Any

import yaml
from plnt_chart_kit import RUNNER_CHART, one, render, validate_manifest

from plnt_common.releases import DesiredRelease
from plnt_common.resources import PlntBackendSpec
from plnt_installer.adapters.helm_values import chart_values

RELEASE = "agents-review-responder-g3"
NAMESPACE = "gpu-runners"
WORKFLOW = yaml.safe_load((RUNNER_CHART / "values.yaml").read_text())["workflow"].encode()

GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
POOL_TAINT = {
    "key": "pool",
    "operator": "Equal",
    "value": "gpu",
    "effect": "NoExecute",
    "tolerationSeconds": 300,
}
AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}
            ]
        }
    }
}


def _backend() -> PlntBackendSpec:
    return PlntBackendSpec.model_validate(
        {
            "type": "kubernetes",
            "kubernetes": {"inCluster": True, "namespace": NAMESPACE},
            "gpuClasses": {
                "h100": {"resourceName": "nvidia.com/gpu", "nodeSelector": {"gpu": "h100"}}
            },
            "runnerPod": {
                "tolerations": [GPU_TAINT, POOL_TAINT],
                "affinity": AFFINITY,
                "priorityClassName": "gpu-inference",
                "imagePullSecrets": [{"name": "registry-pull"}],
                "serviceAccountName": "runners",
                # app.kubernetes.io/name is one of plnt's selector labels: plnt's wins.
                "labels": {"team": "agents", "app.kubernetes.io/name": "stolen"},
                "annotations": {"cost-center": "42", "checksum/workflow": "stolen"},
            },
        }
    )


def _pod_from_installer_values() -> dict[str, Any]:
    release = DesiredRelease(
        namespace="agents",
        run_name="review-responder",
        release=RELEASE,
        revision="1.2.0-g3",
        saga_id="agents.review-responder.3.1",
        spec_digest="sha256:" + "ab" * 32,
        workflow_name="review-responder",
        gpu_class="h100",
        gpu_count=1,
        backend_name="gpu-pool",
    )
    values = chart_values(
        release=release,
        workflow=WORKFLOW,
        backend_name="gpu-pool",
        backend=_backend(),
        placement=None,
    )
    docs = render(RUNNER_CHART, values, release=RELEASE, namespace=NAMESPACE)
    deployment = one(docs, "Deployment")
    validate_manifest(deployment)
    return deployment


def test_every_runner_pod_field_of_the_backend_is_on_the_pod() -> None:
    deployment = _pod_from_installer_values()
    pod = deployment["spec"]["template"]
    spec = pod["spec"]
    assert spec["tolerations"] == [GPU_TAINT, POOL_TAINT]
    assert spec["affinity"] == AFFINITY
    assert spec["priorityClassName"] == "gpu-inference"
    assert spec["imagePullSecrets"] == [{"name": "registry-pull"}]
    assert spec["serviceAccountName"] == "runners"
    assert spec["nodeSelector"] == {"gpu": "h100"}  # the GPU class's, kept
    assert pod["metadata"]["labels"]["team"] == "agents"
    assert pod["metadata"]["annotations"]["cost-center"] == "42"


def test_plnt_labels_and_annotations_win_a_clash() -> None:
    deployment = _pod_from_installer_values()
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert labels["app.kubernetes.io/name"] != "stolen"
    assert all(labels[key] == value for key, value in selector.items())
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["checksum/workflow"] != "stolen"
