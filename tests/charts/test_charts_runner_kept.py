"""charts/plnt-runner for a kept previous revision (role ``previous``, rendered with real
Helm): no autoscaler, replicas.min pods, at least one so a rollback serves at once."""

from typing import Any

from plnt_chart_kit import RUNNER_CHART, one, render, select, validate_manifest

RELEASE = "review-responder-g2"
NAMESPACE = "agents"
BASE: dict[str, Any] = {"workflowRun": {"name": "review-responder"}, "revision": "1.0.0-g2"}


def _render(values: dict[str, Any], **kwargs: Any) -> list[dict[str, Any]]:
    return render(RUNNER_CHART, values, release=RELEASE, namespace=NAMESPACE, **kwargs)


HPA = {"replicas": {"min": 2, "max": 8}, "autoscaling": {"targetInvocationsPerSecond": 25}}
KEDA = {
    "replicas": {"min": 0, "max": 6},
    "autoscaling": {"targetInvocationsPerSecond": 12.5},
    "keda": {"enabled": True},
}


def test_a_kept_release_drops_its_autoscaler_and_runs_replicas_min() -> None:
    stable = _render({**BASE, **HPA, "role": "stable"}, is_install=False)
    assert select(stable, "HorizontalPodAutoscaler")
    assert "replicas" not in one(stable, "Deployment")["spec"]  # the HPA owns the count

    kept = _render({**BASE, **HPA, "role": "previous"}, is_install=False)
    for manifest in kept:
        validate_manifest(manifest)
    assert select(kept, "HorizontalPodAutoscaler") == []
    deployment = one(kept, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["metadata"]["labels"]["plnt.work/role"] == "previous"


def test_a_kept_release_scaled_to_zero_by_keda_keeps_one_pod() -> None:
    kept = _render({**BASE, **KEDA, "role": "previous"}, is_install=False)
    assert select(kept, "ScaledObject") == []
    assert one(kept, "Deployment")["spec"]["replicas"] == 1
