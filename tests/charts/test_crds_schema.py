"""The plnt.work CRDs: valid apiextensions/v1 objects with structural schemas, the resource
names and columns the contract fixes, and verdicts that agree with the pydantic models on
good and bad WorkflowRuns and PlntBackends."""

import copy
import hashlib
import re
from collections.abc import Callable
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from plnt_chart_kit import (
    CRD_FILES,
    CRDS_DIR,
    K8S_VERSION,
    PLNT_CHART,
    REPO,
    admission_errors,
    apply_defaults,
    crd_schema,
    load_crd,
    schema_errors,
    walk_schema,
)

from plnt_common.errors import SpecInvalid
from plnt_common.resources import WorkflowRun, parse_resource
from plnt_common.status import ConditionType, Phase

EXAMPLE_SPEC = REPO / "examples" / "registry" / "review-responder" / "1.2.0" / "workflow.yaml"


def example_workflowrun() -> dict[str, Any]:
    """examples/workflowrun.yaml with the integrity pin filled in with the spec's digest."""
    run: dict[str, Any] = yaml.safe_load((REPO / "examples" / "workflowrun.yaml").read_text())
    digest = hashlib.sha256(EXAMPLE_SPEC.read_bytes()).hexdigest()
    run["spec"]["workflow"]["integrityHash"] = f"sha256:{digest}"
    return run


def example_backend() -> dict[str, Any]:
    backend: dict[str, Any] = yaml.safe_load((REPO / "examples" / "backend-local.yaml").read_text())
    return backend


def kubernetes_backend() -> dict[str, Any]:
    return {
        "apiVersion": "plnt.work/v1",
        "kind": "PlntBackend",
        "metadata": {"name": "gpu-cluster-01"},
        "spec": {
            "type": "kubernetes",
            "kubernetes": {"inCluster": True, "namespace": "agents"},
            "gpuClasses": {
                "nvidia.com/h100": {
                    "resourceName": "nvidia.com/gpu",
                    "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                    "capacity": 16,
                }
            },
            "llm": {
                "baseUrl": "https://api.openai.com/v1",
                "model": "gpt-4o-mini",
                "apiKeySecretRef": {"name": "openai", "key": "api-key"},
            },
        },
    }


# ---- the CRD objects ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(CRD_FILES))
def test_crd_is_a_valid_apiextensions_v1_object(kind: str) -> None:
    crd = load_crd(kind)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    kubernetes_validate.validate(crd, K8S_VERSION, strict=True)


def test_the_validator_really_is_strict_about_crds() -> None:
    crd = load_crd("WorkflowRun")
    crd["spec"]["versions"][0]["subresource"] = {"status": {}}  # typo of "subresources"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(crd, K8S_VERSION, strict=True)


def test_the_crds_live_in_crds_only_and_helm_never_installs_them() -> None:
    """Helm installs a chart's crds/ once and never upgrades them, so a stale CRD would
    prune new fields: the CRDs are applied by ``kubectl apply -f crds/``."""
    assert sorted(p.name for p in CRDS_DIR.iterdir()) == sorted(p.name for p in CRD_FILES.values())
    assert not (PLNT_CHART / "crds").exists(), "the chart must not ship CRDs Helm never upgrades"
    assert "kubectl apply -f crds/" in (REPO / "docs" / "kubernetes.md").read_text()


def test_workflowrun_names_scope_and_columns() -> None:
    crd = load_crd("WorkflowRun")
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "workflowruns.plnt.work"
    assert spec["group"] == "plnt.work"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "WorkflowRun"
    assert spec["names"]["plural"] == "workflowruns"
    assert spec["names"]["shortNames"] == ["wr"]
    assert spec["names"]["categories"] == ["plnt"]
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: (c["type"], c["jsonPath"]) for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Phase": ("string", ".status.phase"),
        "Revision": ("string", ".status.revision"),
        "Canary %": ("integer", ".status.canary.trafficPercent"),
        "Step": ("string", ".status.canary.step"),
        "Serving": ("string", '.status.conditions[?(@.type=="Serving")].status'),
        "Endpoint": ("string", ".status.endpoint"),
        "Backends": ("string", '.status.placement[?(@.state=="Serving")].backend'),
        "Age": ("date", ".metadata.creationTimestamp"),
    }


def test_plntbackend_names_scope_and_columns() -> None:
    crd = load_crd("PlntBackend")
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "plntbackends.plnt.work"
    assert spec["group"] == "plnt.work"
    assert spec["scope"] == "Cluster"
    assert spec["names"]["kind"] == "PlntBackend"
    assert spec["names"]["categories"] == ["plnt"]
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    columns = {c["name"]: (c["type"], c["jsonPath"]) for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Type": ("string", ".spec.type"),
        "Age": ("date", ".metadata.creationTimestamp"),
    }


@pytest.mark.parametrize("kind", sorted(CRD_FILES))
def test_printer_columns_point_at_fields_of_the_schema(kind: str) -> None:
    (version,) = load_crd(kind)["spec"]["versions"]
    paths = {".".join(path) for path, _ in walk_schema(crd_schema(kind))}
    for column in version["additionalPrinterColumns"]:
        if column["jsonPath"] == ".metadata.creationTimestamp":
            continue
        # a list filter like conditions[?(@.type=="Serving")] selects items of that list
        path = re.sub(r"\[\?\(@\.[A-Za-z]+==\"[A-Za-z]+\"\)\]", ".[]", column["jsonPath"])
        assert path.lstrip(".") in paths, column


# ---- structural schema rules the API server enforces on CRD creation ----------------------


@pytest.mark.parametrize("kind", sorted(CRD_FILES))
def test_schema_is_structural(kind: str) -> None:
    schema = crd_schema(kind)
    assert schema["properties"]["metadata"] == {"type": "object"}, (
        "metadata may only be `type: object` (its fields are validated by the API server)"
    )
    for path, node in walk_schema(schema):
        where = ".".join(path) or "<root>"
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            assert node.get("type") in {
                "object",
                "array",
                "string",
                "integer",
                "number",
                "boolean",
            }, where
        assert not ("properties" in node and "additionalProperties" in node), where
        if node.get("type") == "array":
            assert "items" in node, where
        if node.get("x-kubernetes-list-type") == "map":
            keys = node["x-kubernetes-list-map-keys"]
            assert set(keys) <= set(node["items"].get("required", [])), where
        for forbidden in ("$ref", "oneOf", "anyOf", "allOf", "not", "nullable"):
            assert forbidden not in node, f"{where}: {forbidden} is not used in plnt CRDs"


@pytest.mark.parametrize("kind", sorted(CRD_FILES))
def test_every_default_validates_against_its_own_schema(kind: str) -> None:
    defaults = [(p, n) for p, n in walk_schema(crd_schema(kind)) if "default" in n]
    assert defaults
    for path, node in defaults:
        defaulted = apply_defaults(node, copy.deepcopy(node["default"]))
        assert schema_errors(node, defaulted) == [], ".".join(path)


def test_status_phase_and_condition_types_are_the_enums_of_plnt_common() -> None:
    status = crd_schema("WorkflowRun")["properties"]["status"]["properties"]
    assert status["phase"]["enum"] == [phase.value for phase in Phase]
    condition = status["conditions"]["items"]
    assert condition["properties"]["type"]["enum"] == [c.value for c in ConditionType]
    assert condition["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert condition["properties"]["lastTransitionTime"]["format"] == "date-time"
    assert set(condition["required"]) == {"type", "status", "reason", "lastTransitionTime"}


def test_a_full_status_as_the_watcher_writes_it_validates() -> None:
    run = example_workflowrun()
    run["status"] = {
        "phase": "Ready",
        "observedGeneration": 3,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Succeeded",
                "message": "all traffic on 1.2.0-g3",
                "lastTransitionTime": "2025-01-01T00:00:00Z",
                "observedGeneration": 3,
            }
        ],
        "revision": "1.2.0-g3",
        "endpoint": "http://plnt.example.com/workflows/review-responder/invoke",
        "specDigest": "sha256:" + "0" * 64,
        "canary": {"revision": "", "trafficPercent": 0},
        "smoke": {
            "invocations": 10,
            "p50Ms": 7.5,
            "p95Ms": 12.0,
            "errorPercent": 0.0,
            "passed": True,
            "reason": "",
            "golden": [
                {"name": "polite", "passed": True, "reason": "similarity 0.81", "similarity": 0.81},
                {"name": "no-refund", "passed": True, "reason": "all rules held"},
            ],
        },
        "sagaId": "default.review-responder.3.1",
        "message": "Ready",
    }
    assert admission_errors("WorkflowRun", run) == []
    parse_resource(run)  # and the model reads it back
    run["status"]["phase"] = "Exploded"
    assert admission_errors("WorkflowRun", run)


# ---- examples and the model/CRD agreement ---------------------------------------------------


def test_example_workflowrun_with_its_integrity_pin_is_admitted() -> None:
    run = example_workflowrun()
    assert admission_errors("WorkflowRun", run) == []
    crd_schema_only = crd_schema("WorkflowRun")
    jsonschema.Draft4Validator(crd_schema_only).validate(apply_defaults(crd_schema_only, run))


def test_example_workflowrun_with_golden_cases_is_admitted_and_read() -> None:
    run = yaml.safe_load((REPO / "examples" / "workflowrun-golden.yaml").read_text())
    # `plnt apply` stores the relative file: registry as an absolute one
    run["spec"]["workflow"]["registry"] = (REPO / "examples" / "registry").as_uri()
    assert admission_errors("WorkflowRun", run) == []
    parsed = parse_resource(run)
    assert isinstance(parsed, WorkflowRun)
    names = [case.name for case in parsed.spec.smoke_test.golden]
    assert names == ["mixed-review-mentions-parking", "complaint-gets-an-apology"]


@pytest.mark.parametrize(
    "make", [example_backend, kubernetes_backend], ids=["backend-local", "backend-kubernetes"]
)
def test_example_backends_are_admitted(make: Callable[[], dict[str, Any]]) -> None:
    assert admission_errors("PlntBackend", make()) == []


def test_defaults_match_what_the_model_fills_in() -> None:
    run = example_workflowrun()
    del run["spec"]["replicas"], run["spec"]["canary"], run["spec"]["smokeTest"]
    defaulted = apply_defaults(crd_schema("WorkflowRun"), run)
    model = parse_resource(run).spec
    assert defaulted["spec"]["replicas"] == {"min": model.replicas.min, "max": model.replicas.max}
    assert defaulted["spec"]["canary"] == {
        "trafficPercent": model.canary.traffic_percent,
        "manualGate": model.canary.manual_gate,
    }
    assert defaulted["spec"]["rollback"] == {}
    assert model.rollback.keep_previous_for is None
    assert defaulted["spec"]["smokeTest"] == {
        "invocations": model.smoke_test.invocations,
        "p95BudgetMs": model.smoke_test.p95_budget_ms,
        "errorBudgetPercent": model.smoke_test.error_budget_percent,
    }
    assert defaulted["spec"]["backend"]["gpuCount"] == 2


Mutation = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Mutation:
    def mutate(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = obj
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value

    return mutate


def _drop(path: str) -> Mutation:
    def mutate(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = obj
        for key in parents:
            node = node[key]
        del node[last]

    return mutate


def _pull_secret(registry: str, name: str) -> Mutation:
    def mutate(obj: dict[str, Any]) -> None:
        obj["spec"]["workflow"]["registry"] = registry
        obj["spec"]["workflow"]["pullSecret"] = {"name": name}

    return mutate


def _golden(*cases: dict[str, Any]) -> Mutation:
    return _set("spec.smokeTest.golden", list(cases))


def _case(name: str = "polite-reply", **expect: Any) -> dict[str, Any]:
    return {"name": name, "input": {"review": "Great service but slow parking"}, "expect": expect}


POLITE = _case(
    contains=["parking"],
    notContains=["refund"],
    matches="(?i)thank",
    similarTo="Thank you; sorry about the parking.",
    minSimilarity=0.6,
)
GOLDEN_CASES: list[tuple[str, Mutation, bool]] = [
    ("golden-every-rule", _golden(POLITE), True),
    ("golden-similar-default-threshold", _golden(_case(similarTo="Thanks")), True),
    ("golden-twenty-cases", _golden(*(_case(f"c{i}", contains=["x"]) for i in range(20))), True),
    ("golden-21-cases", _golden(*(_case(f"c{i}", contains=["x"]) for i in range(21))), False),
    ("golden-names-repeat", _golden(POLITE, POLITE), False),
    ("golden-name-not-a-label", _golden(_case("Polite_Reply", contains=["x"])), False),
    ("golden-name-64-chars", _golden(_case("a" * 64, contains=["x"])), False),
    ("golden-no-rule", _golden(_case()), False),
    ("golden-empty-rule-lists", _golden(_case(contains=[], notContains=[])), False),
    ("golden-threshold-alone", _golden(_case(contains=["x"], minSimilarity=0.5)), False),
    ("golden-threshold-above-1", _golden(_case(similarTo="x", minSimilarity=1.2)), False),
    ("golden-threshold-negative", _golden(_case(similarTo="x", minSimilarity=-0.2)), False),
    ("golden-empty-text", _golden(_case(contains=[""])), False),
    ("golden-text-501-chars", _golden(_case(notContains=["x" * 501])), False),
    ("golden-21-texts", _golden(_case(contains=[f"t{i}" for i in range(21)])), False),
    ("golden-empty-regex", _golden(_case(matches="")), False),
    ("golden-reference-2001-chars", _golden(_case(similarTo="x" * 2001)), False),
    ("golden-unknown-rule", _golden(_case(contain=["x"])), False),
    ("golden-input-not-a-mapping", _golden({**POLITE, "input": "hi"}), False),
    ("golden-without-input", _golden({"name": "c", "expect": {"contains": ["x"]}}), False),
    ("golden-without-expect", _golden({"name": "c", "input": {}}), False),
]
"""What both the API server and plnt refuse. Two checks are plnt's alone (CEL cannot see
them): that matches compiles, and the 16 KiB bound of an input (tests/common)."""


WORKFLOWRUN_CASES: list[tuple[str, Mutation, bool]] = [
    ("example", lambda _: None, True),
    ("prerelease-and-build-semver", _set("spec.workflow.ref", "agent@1.2.0-rc.1+build.5"), True),
    ("file-registry", _set("spec.workflow.registry", "file:///srv/registry"), True),
    ("oci-registry", _set("spec.workflow.registry", "oci://ghcr.io:443/microagents/specs"), True),
    ("s3-registry-with-prefix", _set("spec.workflow.registry", "s3://my-bucket/team/a"), True),
    ("no-integrity-pin", _drop("spec.workflow.integrityHash"), True),
    ("scale-to-zero-min", _set("spec.replicas", {"min": 0, "max": 1}), True),
    ("min-equals-max", _set("spec.replicas", {"min": 3, "max": 3}), True),
    ("traffic-0", _set("spec.canary.trafficPercent", 0), True),
    ("traffic-100", _set("spec.canary.trafficPercent", 100), True),
    ("name-of-40-chars", _set("metadata.name", "a" * 40), True),
    ("gpu-count-16", _set("spec.backend.gpuCount", 16), True),
    ("pull-secret-on-oci", _pull_secret("oci://registry.lan:5000/specs", "regcred"), True),
    ("pull-secret-dotted-name", _pull_secret("oci://ghcr.io/a", "ghcr.io-creds"), True),
    ("pull-secret-on-s3", _pull_secret("s3://my-bucket", "regcred"), False),
    ("pull-secret-on-file", _pull_secret("file:///srv/registry", "regcred"), False),
    ("pull-secret-name-uppercase", _pull_secret("oci://ghcr.io/a", "RegCred"), False),
    ("pull-secret-name-empty", _pull_secret("oci://ghcr.io/a", ""), False),
    ("pull-secret-name-254-chars", _pull_secret("oci://ghcr.io/a", "a" * 254), False),
    ("pull-secret-without-name", _set("spec.workflow.pullSecret", {}), False),
    ("ref-without-version", _set("spec.workflow.ref", "review-responder"), False),
    ("ref-version-not-semver", _set("spec.workflow.ref", "review-responder@1.2"), False),
    ("ref-version-leading-zero", _set("spec.workflow.ref", "review-responder@01.2.0"), False),
    ("ref-name-uppercase", _set("spec.workflow.ref", "Review@1.2.0"), False),
    ("ref-name-leading-dash", _set("spec.workflow.ref", "-review@1.2.0"), False),
    ("registry-http", _set("spec.workflow.registry", "http://example.com/specs"), False),
    ("registry-s3-uppercase-bucket", _set("spec.workflow.registry", "s3://MyBucket"), False),
    ("registry-s3-bucket-too-short", _set("spec.workflow.registry", "s3://ab"), False),
    ("registry-file-relative", _set("spec.workflow.registry", "file://specs"), False),
    ("registry-dotdot-segment", _set("spec.workflow.registry", "s3://bucket/a/../b"), False),
    ("registry-oci-without-host", _set("spec.workflow.registry", "oci://"), False),
    ("integrity-placeholder", _set("spec.workflow.integrityHash", "sha256:9a1b..."), False),
    ("integrity-uppercase-hex", _set("spec.workflow.integrityHash", "sha256:" + "A" * 64), False),
    ("integrity-other-algorithm", _set("spec.workflow.integrityHash", "md5:" + "a" * 32), False),
    ("traffic-101", _set("spec.canary.trafficPercent", 101), False),
    ("traffic-negative", _set("spec.canary.trafficPercent", -1), False),
    ("min-above-max", _set("spec.replicas", {"min": 5, "max": 2}), False),
    ("min-above-defaulted-max", _set("spec.replicas", {"min": 3}), False),
    ("max-zero", _set("spec.replicas", {"min": 0, "max": 0}), False),
    ("replicas-above-1000", _set("spec.replicas", {"min": 1, "max": 1001}), False),
    ("gpu-count-17", _set("spec.backend.gpuCount", 17), False),
    ("cluster-not-a-label", _set("spec.backend.cluster", "GPU_cluster"), False),
    ("name-of-41-chars", _set("metadata.name", "a" * 41), False),
    ("name-uppercase", _set("metadata.name", "Review-Responder"), False),
    ("name-trailing-dash", _set("metadata.name", "review-"), False),
    ("smoke-zero-invocations", _set("spec.smokeTest.invocations", 0), False),
    ("smoke-zero-p95-budget", _set("spec.smokeTest.p95BudgetMs", 0), False),
    ("smoke-error-budget-101", _set("spec.smokeTest.errorBudgetPercent", 101), False),
    ("autoscaling-target-zero", _set("spec.autoscaling.targetInvocationsPerSecond", 0), False),
    ("no-backend", _drop("spec.backend"), False),
    ("no-ref", _drop("spec.workflow.ref"), False),
    *GOLDEN_CASES,
]


@pytest.mark.parametrize(
    ("mutate", "valid"),
    [(m, v) for _, m, v in WORKFLOWRUN_CASES],
    ids=[name for name, _, _ in WORKFLOWRUN_CASES],
)
def test_crd_and_model_agree_on_workflowruns(mutate: Mutation, valid: bool) -> None:
    run = example_workflowrun()
    mutate(run)
    errors = admission_errors("WorkflowRun", run)
    assert (errors == []) is valid, errors
    if valid:
        parse_resource(copy.deepcopy(run))
    else:
        with pytest.raises(SpecInvalid):
            parse_resource(copy.deepcopy(run))


BACKEND_CASES: list[tuple[str, Callable[[], dict[str, Any]], Mutation, bool]] = [
    ("local-example", example_backend, lambda _: None, True),
    ("kubernetes-in-cluster", kubernetes_backend, lambda _: None, True),
    (
        "kubernetes-kubeconfig-secret",
        kubernetes_backend,
        _set("spec.kubernetes", {"kubeconfigSecretRef": {"name": "remote", "key": "config"}}),
        True,
    ),
    (
        "local-with-llm-env",
        example_backend,
        _set("spec.llm", {"baseUrl": "http://llm:8000/v1", "model": "m", "apiKeyEnv": "KEY"}),
        True,
    ),
    ("unknown-type", example_backend, _set("spec.type", "docker"), False),
    ("kubernetes-without-target", example_backend, _set("spec.type", "kubernetes"), False),
    (
        "kubernetes-both-credentials",
        kubernetes_backend,
        _set("spec.kubernetes.kubeconfigSecretRef", {"name": "remote", "key": "config"}),
        False,
    ),
    (
        "kubernetes-no-credentials",
        kubernetes_backend,
        _set("spec.kubernetes", {"namespace": "agents"}),
        False,
    ),
    (
        "kubeconfig-ref-without-key",
        kubernetes_backend,
        _set("spec.kubernetes", {"kubeconfigSecretRef": {"name": "remote"}}),
        False,
    ),
    (
        "llm-with-prices",
        kubernetes_backend,
        _set("spec.llm.inputPricePerMTokUsd", 0.15),
        True,
    ),
    (
        "llm-structured-outputs",
        kubernetes_backend,
        _set("spec.llm.structuredOutputs", True),
        True,
    ),
    (
        "llm-structured-outputs-not-a-bool",
        kubernetes_backend,
        _set("spec.llm.structuredOutputs", "sometimes"),
        False,
    ),
    ("llm-negative-price", kubernetes_backend, _set("spec.llm.outputPricePerMTokUsd", -1), False),
    ("llm-ftp-url", kubernetes_backend, _set("spec.llm.baseUrl", "ftp://llm"), False),
    ("llm-empty-model", kubernetes_backend, _set("spec.llm.model", ""), False),
    (
        "gpu-class-negative-capacity",
        example_backend,
        _set("spec.gpuClasses", {"x": {"resourceName": "nvidia.com/gpu", "capacity": -1}}),
        False,
    ),
    (
        "gpu-class-without-resource",
        example_backend,
        _set("spec.gpuClasses", {"x": {"capacity": 1}}),
        False,
    ),
    ("name-not-a-label", example_backend, _set("metadata.name", "GPU_cluster"), False),
    ("no-type", example_backend, _drop("spec.type"), False),
]


@pytest.mark.parametrize(
    ("make", "mutate", "valid"),
    [(f, m, v) for _, f, m, v in BACKEND_CASES],
    ids=[name for name, _, _, _ in BACKEND_CASES],
)
def test_crd_and_model_agree_on_backends(
    make: Callable[[], dict[str, Any]], mutate: Mutation, valid: bool
) -> None:
    backend = make()
    mutate(backend)
    errors = admission_errors("PlntBackend", backend)
    assert (errors == []) is valid, errors
    if valid:
        parse_resource(copy.deepcopy(backend))
    else:
        with pytest.raises(SpecInvalid):
            parse_resource(copy.deepcopy(backend))


def test_crd_is_stricter_than_the_model_on_the_target_namespace() -> None:
    # A namespace that is not a DNS-1123 label can never hold a release; the model takes
    # any string, the CRD refuses it at apply time.
    backend = kubernetes_backend()
    backend["spec"]["kubernetes"]["namespace"] = "Agents_NS"
    assert admission_errors("PlntBackend", backend)
