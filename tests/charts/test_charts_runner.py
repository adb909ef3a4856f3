"""charts/plnt-runner rendered with real Helm for several value sets: every manifest is
valid Kubernetes (strict), and the release carries what a runner revision needs: the
workflow mounted where PLNT_RUNNER_WORKFLOW_FILE points, GPU limits and node selection,
probes, autoscaling bounds, a disruption budget, a locked-down security context and the
plnt.work labels."""

from typing import Any

import helm_python
import pytest
from plnt_chart_kit import (
    RUNNER_CHART,
    container_env,
    one,
    render,
    select,
    settings_env_names,
    validate_manifest,
)

from plnt_runner.settings import RunnerSettings

DIGEST = "sha256:" + "0123456789abcdef" * 4
RELEASE = "review-responder-g3"
NAMESPACE = "agents"

BASE: dict[str, Any] = {
    "workflowRun": {"name": "review-responder"},
    "revision": "1.2.0-g3",
    "specDigest": DIGEST,
}

SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "gpu-class-node-selector-keda": {
        **BASE,
        "gpu": {
            "resourceName": "nvidia.com/gpu",
            "count": 2,
            "nodeSelector": {"nvidia.com/gpu.product": "H100", "pool": "gpu"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
        "nodeSelector": {"pool": "agent-workflows"},
        "replicas": {"min": 0, "max": 6},
        "autoscaling": {"targetInvocationsPerSecond": 12.5},
        "keda": {"enabled": True, "prometheus": {"activationThreshold": "0.5"}},
        "memoryGiB": 40,
    },
    "hpa-bounds": {
        **BASE,
        "replicas": {"min": 2, "max": 8},
        "autoscaling": {"targetInvocationsPerSecond": 25},
        "role": "stable",
    },
    "llm-secret-and-list-entrypoint": {
        **BASE,
        "llm": {
            "baseUrl": "https://api.openai.com/v1",
            "model": "gpt-4o-mini",
            "apiKeySecretRef": {"name": "openai", "key": "api-key"},
        },
        "runtime": {
            "image": "registry.example.com/agents/runner:1.0",
            "entrypoint": ["plnt", "serve", "runner"],
        },
        "podDisruptionBudget": {"minAvailable": 1},
    },
}


def _render(values: dict[str, Any], **kwargs: Any) -> list[dict[str, Any]]:
    return render(RUNNER_CHART, values, release=RELEASE, namespace=NAMESPACE, **kwargs)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_rendered_manifest_is_valid_kubernetes(name: str) -> None:
    docs = _render(SCENARIOS[name])
    kinds = sorted(doc["kind"] for doc in docs)
    assert {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget"} <= set(kinds)
    for doc in docs:
        validate_manifest(doc)
        assert doc["metadata"]["namespace"] == NAMESPACE


def test_the_validation_is_strict() -> None:
    deployment = one(_render(SCENARIOS["hpa-bounds"]), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}  # typo
    with pytest.raises(Exception, match="readinesProbe"):
        validate_manifest(deployment)
    scaled = one(_render(SCENARIOS["gpu-class-node-selector-keda"]), "ScaledObject")
    scaled["spec"]["triggers"][0]["metadata"]["threshold"] = 12.5  # KEDA wants strings
    with pytest.raises(Exception, match=r"12\.5"):
        validate_manifest(scaled)


def test_gpu_limit_and_node_selector_come_from_the_gpu_class_and_the_run() -> None:
    docs = _render(SCENARIOS["gpu-class-node-selector-keda"])
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    resources = pod["containers"][0]["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == 2
    assert resources["limits"]["memory"] == resources["requests"]["memory"] == "40Gi"
    # the class's selector, with the run's value winning on the shared key
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "H100", "pool": "agent-workflows"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]


def test_no_gpu_no_gpu_limit() -> None:
    pod = one(_render(SCENARIOS["hpa-bounds"]), "Deployment")["spec"]["template"]["spec"]
    limits = pod["containers"][0]["resources"].get("limits", {})
    assert not any("gpu" in key for key in limits)
    assert "nodeSelector" not in pod


def test_probes_hit_healthz_on_the_runner_port() -> None:
    container = one(_render(SCENARIOS["hpa-bounds"]), "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}


def test_hpa_scales_on_invocations_per_second_between_the_replica_bounds() -> None:
    docs = _render(SCENARIOS["hpa-bounds"])
    hpa = one(docs, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": RELEASE,
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 8)
    assert hpa["spec"]["metrics"] == [
        {
            "type": "Pods",
            "pods": {
                "metric": {"name": "plnt_invocations_per_second"},
                "target": {"type": "AverageValue", "averageValue": "25"},
            },
        }
    ]
    assert select(docs, "ScaledObject") == []
    # on install the Deployment starts at min; the HPA owns the count afterwards
    assert one(docs, "Deployment")["spec"]["replicas"] == 2
    upgraded = one(_render(SCENARIOS["hpa-bounds"], is_install=False), "Deployment")
    assert "replicas" not in upgraded["spec"]


def test_hpa_min_is_at_least_one_and_absent_without_a_target() -> None:
    values = {
        **BASE,
        "replicas": {"min": 0, "max": 3},
        "autoscaling": {"targetInvocationsPerSecond": 0.5},
    }
    hpa = one(_render(values), "HorizontalPodAutoscaler")
    assert hpa["spec"]["minReplicas"] == 1
    assert hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"] == "0.5"
    fixed = _render({**BASE, "replicas": {"min": 3, "max": 5}})
    assert select(fixed, "HorizontalPodAutoscaler") == []
    assert one(fixed, "Deployment")["spec"]["replicas"] == 3


def test_keda_replaces_the_hpa_with_a_prometheus_scaled_object() -> None:
    docs = _render(SCENARIOS["gpu-class-node-selector-keda"])
    assert select(docs, "HorizontalPodAutoscaler") == []
    scaled = one(docs, "ScaledObject")
    spec = scaled["spec"]
    assert spec["scaleTargetRef"]["name"] == RELEASE
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (0, 6)
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "prometheus"
    assert trigger["metricType"] == "AverageValue"
    assert trigger["metadata"]["threshold"] == "12.5"
    assert trigger["metadata"]["activationThreshold"] == "0.5"
    assert "plnt_invocations_total" in trigger["metadata"]["query"]
    assert f'namespace="{NAMESPACE}"' in trigger["metadata"]["query"]
    # scale to zero is KEDA's business; the first pod still comes up for the smoke test
    assert one(docs, "Deployment")["spec"]["replicas"] == 1


def test_keda_without_a_target_is_refused() -> None:
    with pytest.raises(helm_python.HelmError, match="targetInvocationsPerSecond"):
        _render({**BASE, "keda": {"enabled": True}})


def test_pod_disruption_budget_selects_the_runner_pods() -> None:
    docs = _render(SCENARIOS["hpa-bounds"])
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    pinned = one(_render(SCENARIOS["llm-secret-and-list-entrypoint"]), "PodDisruptionBudget")
    assert pinned["spec"]["minAvailable"] == 1
    assert "maxUnavailable" not in pinned["spec"]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_runner_runs_non_root_on_a_read_only_root_with_no_capabilities(name: str) -> None:
    pod = one(_render(SCENARIOS[name]), "Deployment")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    context = pod["containers"][0]["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["runAsNonRoot"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert "/tmp" in mounts


def test_labels_carry_run_revision_and_digest_without_prefix() -> None:
    docs = _render(SCENARIOS["hpa-bounds"])
    for doc in docs:
        labels = doc["metadata"]["labels"]
        assert labels["plnt.work/workflowrun"] == "review-responder"
        assert labels["plnt.work/revision"] == "1.2.0-g3"
        assert labels["plnt.work/spec-digest"] == DIGEST.removeprefix("sha256:")[:63]
        assert len(labels["plnt.work/spec-digest"]) == 63
        assert labels["plnt.work/role"] == "stable"
        assert labels["app.kubernetes.io/instance"] == RELEASE
    template_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert template_labels["plnt.work/revision"] == "1.2.0-g3"
    service = one(docs, "Service")
    assert service["spec"]["selector"].items() <= template_labels.items()
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}
    ]


def test_a_semver_build_suffix_becomes_a_valid_label_value() -> None:
    docs = _render({**BASE, "revision": "1.2.0+build.7-g3"})
    deployment = one(docs, "Deployment")
    assert deployment["metadata"]["labels"]["plnt.work/revision"] == "1.2.0_build.7-g3"
    validate_manifest(deployment)
    assert container_env(deployment)["PLNT_RUNNER_REVISION"] == "1.2.0+build.7-g3"


def test_workflow_is_mounted_where_the_runner_is_told_to_read_it() -> None:
    values = {**BASE, "workflow": "apiVersion: microagents.dev/v1\nkind: Workflow\n"}
    docs = _render(values)
    config_map = one(docs, "ConfigMap")
    assert config_map["data"]["workflow.yaml"] == values["workflow"]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    env = container_env(one(docs, "Deployment"))
    (volume,) = [v for v in pod["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
    assert env["PLNT_RUNNER_WORKFLOW_FILE"] == f"{mount['mountPath']}/workflow.yaml"
    assert mount["readOnly"] is True


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_env_var_is_a_runner_setting_and_parses(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = container_env(one(_render(SCENARIOS[name]), "Deployment"))
    known = settings_env_names(RunnerSettings)
    unknown = sorted(key for key in env if key not in known)
    assert unknown == [], f"env vars the runner does not read: {unknown}"
    for key in list(known):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        if isinstance(value, str):
            monkeypatch.setenv(key, value)
        else:  # a secretKeyRef: the kubelet would inject the Secret's value
            monkeypatch.setenv(key, "from-secret")
    settings = RunnerSettings()  # type: ignore[call-arg]
    assert settings.host == "0.0.0.0"
    assert settings.port == 8080
    assert str(settings.workflow_file) == "/etc/plnt/workflow/workflow.yaml"
    assert settings.revision == env["PLNT_RUNNER_REVISION"]
    assert settings.max_body_bytes == 1048576


def test_llm_endpoint_and_api_key_secret() -> None:
    env = container_env(one(_render(SCENARIOS["llm-secret-and-list-entrypoint"]), "Deployment"))
    assert env["PLNT_RUNNER_LLM_BASE_URL"] == "https://api.openai.com/v1"
    assert env["PLNT_RUNNER_LLM_MODEL"] == "gpt-4o-mini"
    assert env["PLNT_RUNNER_LLM_API_KEY"] == {"secretKeyRef": {"name": "openai", "key": "api-key"}}
    offline = container_env(one(_render(BASE), "Deployment"))
    assert not {"PLNT_RUNNER_LLM_BASE_URL", "PLNT_RUNNER_LLM_API_KEY"} & set(offline)


@pytest.mark.parametrize(
    ("entrypoint", "command"),
    [
        ("python -m review_responder", ["python", "-m", "review_responder"]),
        ("  python   -m  app ", ["python", "-m", "app"]),
        (["plnt", "serve", "runner"], ["plnt", "serve", "runner"]),
        ("", None),
    ],
    ids=["string", "extra-spaces", "list", "image-default"],
)
def test_runtime_image_and_entrypoint(entrypoint: Any, command: list[str] | None) -> None:
    values = {
        **BASE,
        "runtime": {"image": "ghcr.io/microagents/runner:0.4.0", "entrypoint": entrypoint},
    }
    container = one(_render(values), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "ghcr.io/microagents/runner:0.4.0"
    assert container.get("command") == command


def test_prometheus_scrapes_the_runner_metrics() -> None:
    annotations = one(_render(BASE), "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "8080"
    assert annotations["prometheus.io/path"] == "/metrics"
    assert len(annotations["checksum/workflow"]) == 64


@pytest.mark.parametrize(
    "values",
    [
        {"role": "blue"},
        {"replicas": {"min": 1, "max": 0}},
        {"runtime": {"image": ""}},
        {"specDigest": "sha256:9a1b..."},
        {"workflowRun": {"name": "Review_Responder"}},
        {"gpu": {"count": 17}},
        {"autoscaling": {"targetInvocationsPerSecond": 0}},
        {"runner": {"prot": 8080}},
    ],
    ids=[
        "role",
        "max-zero",
        "empty-image",
        "digest",
        "run-name",
        "gpu-count",
        "target-zero",
        "typo",
    ],
)
def test_values_schema_rejects_bad_values(values: dict[str, Any]) -> None:
    with pytest.raises(helm_python.HelmValuesError):
        _render({**BASE, **values})


def test_helm_lint_is_clean() -> None:
    report = helm_python.lint(RUNNER_CHART, strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_an_exported_service_gets_a_service_export_of_its_name() -> None:
    docs = _render({"service": {"export": True}})
    export = one(docs, "ServiceExport")
    validate_manifest(export)
    assert export["metadata"]["name"] == one(docs, "Service")["metadata"]["name"]
    assert export["metadata"]["namespace"] == NAMESPACE
    assert select(_render({}), "ServiceExport") == []
