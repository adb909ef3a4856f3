"""The emulator admits custom resources against the project's real CRDs as the API server
does: unknown fields refused, warned or pruned by field validation mode, defaults filled,
OpenAPI keywords and every CEL rule of the CRDs checked, with the server's messages and
``details.causes``."""

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from plnt_testkit.kube_emulator.schema import CrdSchema, FieldValidation
from plnt_testkit.kube_emulator.types import ApiError

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "crds"
EXAMPLES = ROOT / "examples"
NOT_CHECKED = (
    '<nil>: Invalid value: "null": some validation rules were not checked because the '
    "object was invalid; correct the existing errors to complete validation"
)
Obj = dict[str, Any]


def bounded(path: str, value: Any, relation: str, bound: Any) -> str:
    """The cause kube-openapi's number validator gives, as kubectl prints it."""
    return f"{path}: Invalid value: {value}: {path} in body should be {relation} {bound}"


def mistyped(path: str, want: str, got: str) -> str:
    return f'{path}: Invalid value: "{got}": {path} in body must be of type {want}: "{got}"'


LE, GE, GT = "less than or equal to", "greater than or equal to", "greater than"
NAME_LENGTH = (
    "metadata.name must be at most 40 characters "
    "(it becomes NATS subject tokens and Helm release names)"
)
DNS_LABEL = (
    "metadata.name must be a DNS-1123 label "
    "(lowercase letters, digits and '-', starting and ending alphanumeric)"
)
GUARD = (
    "guard.window needs rollback.keepPreviousFor of at least as long "
    "(the guard reverts to the kept previous revision)"
)


def served_schema(file: str) -> CrdSchema:
    crd = yaml.safe_load((CRDS / file).read_text())
    version = next(v for v in crd["spec"]["versions"] if v["served"] and v["storage"])
    return CrdSchema(
        kind=crd["spec"]["names"]["kind"],
        group=crd["spec"]["group"],
        schema=version["schema"]["openAPIV3Schema"],
    )


@pytest.fixture(scope="module")
def runs() -> CrdSchema:
    return served_schema("workflowruns.plnt.work.yaml")


@pytest.fixture(scope="module")
def backends() -> CrdSchema:
    return served_schema("plntbackends.plnt.work.yaml")


def example(name: str) -> Obj:
    doc: Obj = yaml.safe_load((EXAMPLES / name).read_text())
    return doc


def run() -> Obj:
    return example("workflowrun.yaml")


def backend() -> Obj:
    return example("backend-local.yaml")


def admit(schema: CrdSchema, obj: Obj, **kwargs: Any) -> tuple[Obj, list[str]]:
    kwargs.setdefault("old", None)
    kwargs.setdefault("field_validation", "Strict")
    return schema.admit(obj, **kwargs)


def refusal(schema: CrdSchema, obj: Obj, **kwargs: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        admit(schema, obj, **kwargs)
    return caught.value


def causes(error: ApiError) -> list[str]:
    """The causes as kubectl prints them: ``<field>: <message>``."""
    assert error.code == 422 and error.reason == "Invalid", error.status()
    return [f"{c['field']}: {c['message']}" for c in error.details["causes"]]


def present(obj: Any, path: str) -> bool:
    """Whether ``path`` (``spec.a[0].b``) leads to a value in ``obj``."""
    for segment in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        if segment.startswith("["):
            index = int(segment[1:-1])
            if not isinstance(obj, list) or index >= len(obj):
                return False
            obj = obj[index]
        elif isinstance(obj, dict) and segment in obj:
            obj = obj[segment]
        else:
            return False
    return True


def with_defaults(obj: Obj, **spec_defaults: Any) -> Obj:
    expected = copy.deepcopy(obj)
    for dotted, value in spec_defaults.items():
        *parents, leaf = dotted.split("__")
        node = expected["spec"]
        for parent in parents:
            node = node[parent]
        node[leaf] = value
    return expected


# --- examples pass, with the defaults filled ---------------------------------------------


def test_example_run_is_admitted_unchanged_but_for_defaults(runs: CrdSchema) -> None:
    stored, warnings = admit(runs, run())

    assert warnings == []
    assert stored == with_defaults(run(), canary__manualGate=False, rollback={})


def test_golden_example_run_is_admitted_with_its_cases_and_defaults(runs: CrdSchema) -> None:
    applied = example("workflowrun-golden.yaml")
    # `plnt apply` resolves file:./registry against the file's directory before sending it
    applied["spec"]["workflow"]["registry"] = f"file://{EXAMPLES / 'registry'}"

    stored, warnings = admit(runs, applied)

    assert warnings == []
    assert stored == with_defaults(
        applied,
        replicas={"min": 1, "max": 1},
        autoscaling={},
        canary__manualGate=False,
        rollback={},
    )


def test_example_backend_is_admitted_with_the_ready_timeout_default(backends: CrdSchema) -> None:
    expected = backend()
    expected["spec"]["readyTimeout"] = "10m"
    assert admit(backends, backend()) == (expected, [])


def test_progressive_run_is_admitted_with_nested_defaults(runs: CrdSchema) -> None:
    obj = run()
    obj["spec"]["canary"] = {"trafficPercent": 5, "steps": [10, 25, 50], "analysis": {}}
    obj["spec"]["guard"] = {"maxP95Ms": 3000}
    obj["spec"]["rollback"] = {"keepPreviousFor": "30m"}

    stored, _ = admit(runs, obj)

    assert stored["spec"]["canary"] == {
        "trafficPercent": 5,
        "steps": [10, 25, 50],
        "analysis": {"minInvocations": 20, "maxErrorPercent": 1, "maxP95Ms": 2500},
        "manualGate": False,
    }
    assert stored["spec"]["guard"] == {"maxP95Ms": 3000, "window": "5m", "maxErrorPercent": 2}


def test_admit_leaves_the_request_object_alone(runs: CrdSchema) -> None:
    obj = run()
    obj["spec"]["foo"] = 1

    admit(runs, obj, field_validation="Ignore")

    assert obj["spec"]["foo"] == 1 and "rollback" not in obj["spec"]


# --- defaults ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec_change", "where", "expected"),
    [
        pytest.param(
            {}, ("replicas",), {"min": 1, "max": 1}, id="absent-object-default-and-its-own"
        ),
        pytest.param(
            {"replicas": {"max": 3}},
            ("replicas",),
            {"min": 1, "max": 3},
            id="present-object-gets-field-defaults",
        ),
        pytest.param(
            {"canary": {}},
            ("canary",),
            {"trafficPercent": 10, "manualGate": False},
            id="empty-object",
        ),
        pytest.param(
            {"canary": {"trafficPercent": None}},
            ("canary", "trafficPercent"),
            10,
            id="null-takes-the-default",
        ),
        pytest.param(
            {"smokeTest": {}},
            ("smokeTest",),
            {"invocations": 10, "p95BudgetMs": 2500, "errorBudgetPercent": 1},
            id="smoke-test",
        ),
        pytest.param(
            {"backend": {"cluster": "c"}},
            ("backend",),
            {"cluster": "c", "gpuCount": 0},
            id="backend-gpu-count",
        ),
    ],
)
def test_defaults_are_filled(
    runs: CrdSchema, spec_change: Obj, where: tuple[str, ...], expected: Any
) -> None:
    obj = run()
    for key in ("replicas", "canary", "smokeTest"):
        obj["spec"].pop(key)
    obj["spec"].update(spec_change)

    stored, _ = admit(runs, obj)

    found = stored["spec"]
    for key in where:
        found = found[key]
    assert found == expected


def test_a_null_without_a_default_is_dropped(runs: CrdSchema) -> None:
    obj = run()
    obj["spec"]["backend"]["gpuClass"] = None

    stored, _ = admit(runs, obj)

    assert "gpuClass" not in stored["spec"]["backend"]


def test_defaults_apply_in_map_values_and_on_update(backends: CrdSchema) -> None:
    old = backend()
    obj = backend()
    obj["spec"]["gpuClasses"]["nvidia.com/a100"] = {"resourceName": "nvidia.com/gpu"}

    stored, _ = admit(backends, obj, old=old)

    assert stored["spec"]["gpuClasses"]["nvidia.com/a100"] == {
        "resourceName": "nvidia.com/gpu",
        "capacity": 0,
    }


def test_kubernetes_backend_gets_its_defaults(backends: CrdSchema) -> None:
    obj = backend()
    obj["spec"]["type"] = "kubernetes"
    obj["spec"]["kubernetes"] = {"kubeconfigSecretRef": {"name": "kc", "key": "config"}}

    stored, _ = admit(backends, obj)

    assert stored["spec"]["kubernetes"] == {
        "kubeconfigSecretRef": {"name": "kc", "key": "config"},
        "inCluster": False,
        "namespace": "default",
        "serviceDomain": "svc.cluster.local",
        "serviceExport": False,
    }


# --- unknown fields and field validation -------------------------------------------------

UNKNOWN: list[Any] = [
    pytest.param(lambda o: o["spec"].update(foo=1), ["spec.foo"], id="spec"),
    pytest.param(
        lambda o: o["spec"]["canary"].update(bogus={"a": 1}), ["spec.canary.bogus"], id="nested"
    ),
    pytest.param(lambda o: o.update(extra="x"), ["extra"], id="root"),
    pytest.param(lambda o: o["metadata"].update(colour="red"), ["metadata.colour"], id="metadata"),
    pytest.param(
        lambda o: o["spec"]["smokeTest"].update(
            golden=[{"name": "a", "input": {}, "expect": {"matches": "x", "typo": 1}}]
        ),
        ["spec.smokeTest.golden[0].expect.typo"],
        id="list-item",
    ),
    pytest.param(
        lambda o: (o["spec"].update(foo=1), o["spec"]["workflow"].update(bar=2)),
        ["spec.workflow.bar", "spec.foo"],
        id="two",
    ),
]


@pytest.mark.parametrize(("mutate", "paths"), UNKNOWN)
def test_strict_refuses_unknown_fields_naming_them(
    runs: CrdSchema, mutate: Callable[[Obj], Any], paths: list[str]
) -> None:
    obj = run()
    mutate(obj)

    error = refusal(runs, obj, field_validation="Strict")

    assert (error.code, error.reason) == (400, "BadRequest")
    named = ", ".join(f'unknown field "{p}"' for p in paths)
    assert error.message == f"strict decoding error: {named}"


@pytest.mark.parametrize(("mutate", "paths"), UNKNOWN)
def test_warn_prunes_unknown_fields_with_a_warning_each(
    runs: CrdSchema, mutate: Callable[[Obj], Any], paths: list[str]
) -> None:
    obj = run()
    mutate(obj)

    stored, warnings = admit(runs, obj, field_validation="Warn")

    assert sorted(warnings) == sorted(f'unknown field "{p}"' for p in paths)
    assert [p for p in paths if present(stored, p)] == []


@pytest.mark.parametrize(("mutate", "paths"), UNKNOWN)
def test_ignore_prunes_unknown_fields_silently(
    runs: CrdSchema, mutate: Callable[[Obj], Any], paths: list[str]
) -> None:
    obj = run()
    mutate(obj)

    stored, warnings = admit(runs, obj, field_validation="Ignore")

    assert warnings == []
    assert [p for p in paths if present(stored, p)] == []
    assert stored["spec"]["workflow"]["ref"] == "review-responder@1.2.0"


def test_preserve_unknown_fields_and_additional_properties_keep_data(runs: CrdSchema) -> None:
    obj = run()
    payload = {"review": "ok", "nested": {"deep": [1, {"x": None}]}, "n": 2.5}
    obj["spec"]["smokeTest"]["payload"] = payload
    obj["spec"]["smokeTest"]["golden"] = [
        {"name": "a", "input": {"anything": {"at": ["all"]}}, "expect": {"contains": ["x"]}}
    ]
    obj["spec"]["backend"]["nodeSelector"] = {"pool": "a", "zone": "b"}

    stored, warnings = admit(runs, obj, field_validation="Strict")

    assert warnings == []
    assert stored["spec"]["smokeTest"]["payload"] == payload
    assert stored["spec"]["smokeTest"]["golden"][0]["input"] == {"anything": {"at": ["all"]}}
    assert stored["spec"]["backend"]["nodeSelector"] == {"pool": "a", "zone": "b"}


def test_server_set_metadata_and_type_meta_are_kept(runs: CrdSchema) -> None:
    obj = run()
    meta = {
        "name": "review-responder",
        "namespace": "default",
        "uid": "u",
        "resourceVersion": "7",
        "generation": 2,
        "labels": {"a": "b"},
        "annotations": {"c": "d"},
        "finalizers": ["plnt.work/cleanup"],
        "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        "creationTimestamp": "2026-01-01T00:00:00Z",
    }
    obj["metadata"] = meta

    stored, _ = admit(runs, obj)

    assert stored["metadata"] == meta
    assert (stored["apiVersion"], stored["kind"]) == ("plnt.work/v1", "WorkflowRun")


# --- OpenAPI keywords --------------------------------------------------------------------


def put(path: str, value: Any) -> Callable[[Obj], None]:
    def mutate(obj: Obj) -> None:
        *parents, leaf = path.split(".")
        node = obj
        for key in parents:
            node = node.setdefault(key, {}) if isinstance(node, dict) else node[int(key)]
        if value is _DELETE:
            del node[leaf]
        else:
            node[leaf] = value

    return mutate


_DELETE = object()


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        pytest.param(
            put("spec.canary.trafficPercent", 150),
            [
                bounded("spec.canary.trafficPercent", 150, LE, 100),
                'spec.canary: Invalid value: "object": '
                "canary.trafficPercent must be between 0 and 100",
            ],
            id="maximum-and-its-cel-rule",
        ),
        pytest.param(
            put("spec.backend.gpuCount", 17),
            [bounded("spec.backend.gpuCount", 17, LE, 16)],
            id="maximum",
        ),
        pytest.param(
            put("spec.replicas.min", -1),
            [bounded("spec.replicas.min", -1, GE, 0)],
            id="minimum",
        ),
        pytest.param(
            put("spec.autoscaling.targetInvocationsPerSecond", 0),
            [bounded("spec.autoscaling.targetInvocationsPerSecond", 0, GT, 0)],
            id="exclusive-minimum",
        ),
        pytest.param(
            put("spec.smokeTest.errorBudgetPercent", 100.5),
            [bounded("spec.smokeTest.errorBudgetPercent", 100.5, LE, 100)],
            id="number-maximum",
        ),
        pytest.param(
            put("spec.canary.analysis", {"minInvocations": 2000000}),
            [bounded("spec.canary.analysis.minInvocations", 2000000, LE, 1000000)],
            id="large-maximum",
        ),
        pytest.param(
            put("spec.workflow.ref", _DELETE),
            ["spec.workflow.ref: Required value", NOT_CHECKED],
            id="required",
        ),
        pytest.param(
            put("spec", _DELETE),
            ["spec: Required value", NOT_CHECKED],
            id="required-spec",
        ),
        pytest.param(
            put("spec.workflow.ref", "review-responder"),
            [
                'spec.workflow.ref: Invalid value: "review-responder": '
                "spec.workflow.ref in body should match "
                "'^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?@(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)"
                "(-[0-9A-Za-z-]+(\\.[0-9A-Za-z-]+)*)?(\\+[0-9A-Za-z-]+(\\.[0-9A-Za-z-]+)*)?$'"
            ],
            id="pattern",
        ),
        pytest.param(
            put("spec.backend.cluster", "c" * 64),
            ["spec.backend.cluster: Too long: may not be more than 63 bytes", NOT_CHECKED],
            id="max-length",
        ),
        pytest.param(
            put("spec.canary.steps", list(range(1, 12))),
            ["spec.canary.steps: Too many: 11: must have at most 10 items", NOT_CHECKED],
            id="max-items",
        ),
        pytest.param(
            put("spec.canary.steps", [10, 100]),
            [bounded("spec.canary.steps[1]", 100, LE, 99)],
            id="list-item",
        ),
        pytest.param(
            put("spec.replicas.min", "two"),
            [
                mistyped("spec.replicas.min", "integer", "string"),
                NOT_CHECKED,
            ],
            id="type",
        ),
        pytest.param(
            put("spec.canary.manualGate", "yes"),
            [
                mistyped("spec.canary.manualGate", "boolean", "string"),
                NOT_CHECKED,
            ],
            id="type-boolean",
        ),
        pytest.param(
            put("spec.smokeTest.golden", [{"name": "a", "input": {}, "expect": {"matches": ""}}]),
            [
                'spec.smokeTest.golden[0].expect.matches: Invalid value: "": '
                "spec.smokeTest.golden[0].expect.matches in body should be at least 1 chars long"
            ],
            id="min-length",
        ),
        pytest.param(
            put("spec.backend.nodeSelector", {"pool": 3}),
            [
                mistyped("spec.backend.nodeSelector.pool", "string", "integer"),
                NOT_CHECKED,
            ],
            id="additional-properties",
        ),
    ],
)
def test_run_values_breaking_the_schema_are_refused(
    runs: CrdSchema, mutate: Callable[[Obj], None], expected: list[str]
) -> None:
    obj = run()
    mutate(obj)

    error = refusal(runs, obj)

    assert causes(error) == expected
    one = expected[0] if len(expected) == 1 else "[" + ", ".join(expected) + "]"
    assert error.message == f'WorkflowRun.plnt.work "review-responder" is invalid: {one}'
    assert error.details | {"causes": []} == {
        "name": "review-responder",
        "group": "plnt.work",
        "kind": "WorkflowRun",
        "causes": [],
    }


def test_cause_reasons_are_the_apiserver_cause_types(runs: CrdSchema) -> None:
    obj = run()
    obj["spec"]["canary"]["trafficPercent"] = 101
    del obj["spec"]["workflow"]["ref"]
    obj["spec"]["backend"]["cluster"] = "c" * 64
    obj["spec"]["canary"]["steps"] = list(range(1, 12))
    obj["spec"]["replicas"]["max"] = "many"

    error = refusal(runs, obj)

    reasons = {c["field"]: c["reason"] for c in error.details["causes"]}
    assert reasons == {
        "spec.workflow.ref": "FieldValueRequired",
        "spec.backend.cluster": "FieldValueTooLong",
        "spec.replicas.max": "FieldValueTypeInvalid",
        "spec.canary.trafficPercent": "FieldValueInvalid",
        "spec.canary.steps": "FieldValueTooMany",
        "<nil>": "FieldValueInvalid",
    }


def test_bad_enum_is_not_supported_naming_the_values(backends: CrdSchema) -> None:
    obj = backend()
    obj["spec"]["type"] = "docker"

    error = refusal(backends, obj)

    assert error.message == (
        'PlntBackend.plnt.work "gpu-cluster-01" is invalid: [spec.type: Unsupported value: '
        '"docker": supported values: "local", "kubernetes", ' + NOT_CHECKED + "]"
    )
    assert error.details["causes"][0] == {
        "reason": "FieldValueNotSupported",
        "message": 'Unsupported value: "docker": supported values: "local", "kubernetes"',
        "field": "spec.type",
    }


def test_duplicate_keys_of_a_map_list_are_refused(runs: CrdSchema) -> None:
    obj = run()
    case = {"name": "a", "input": {}, "expect": {"matches": "x"}}
    obj["spec"]["smokeTest"]["golden"] = [case, case]

    error = refusal(runs, obj)

    assert [(c["reason"], c["field"]) for c in error.details["causes"]] == [
        ("FieldValueDuplicate", "spec.smokeTest.golden[1]")
    ]


# --- status --------------------------------------------------------------------------------


def test_status_subresource_validates_only_status(runs: CrdSchema) -> None:
    stored = run()
    stored["spec"]["canary"]["trafficPercent"] = 150  # not looked at on a status write
    obj = copy.deepcopy(stored)
    obj["status"] = {
        "phase": "Ready",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Promoted",
                "lastTransitionTime": "2026-12-04T10:00:00Z",
            }
        ],
        "observedGeneration": 1,
        "extra": 1,
    }

    written, warnings = admit(runs, obj, old=stored, subresource="status", field_validation="Warn")

    assert warnings == ['unknown field "status.extra"']
    assert written["spec"] == stored["spec"]
    assert "extra" not in written["status"]


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        pytest.param(
            {"phase": "Done"},
            [
                'status.phase: Unsupported value: "Done": supported values: "Pending", "Pulling", '
                '"Installing", "Smoking", "Shadowing", "Progressing", "Paused", "Promoting", '
                '"Ready", "RollingBack", "RolledBack", "Failed", "Reverted", "Deleting"',
                NOT_CHECKED,
            ],
            id="enum",
        ),
        pytest.param(
            {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "R",
                        "lastTransitionTime": "yesterday",
                    }
                ]
            },
            [
                'status.conditions[0].lastTransitionTime: Invalid value: "yesterday": '
                "status.conditions[0].lastTransitionTime in body must be of type date-time: "
                '"yesterday"'
            ],
            id="date-time",
        ),
        pytest.param(
            {"conditions": [{"type": "Ready", "status": "True"}]},
            [
                "status.conditions[0].reason: Required value",
                "status.conditions[0].lastTransitionTime: Required value",
                NOT_CHECKED,
            ],
            id="required-in-list",
        ),
    ],
)
def test_bad_status_is_refused(runs: CrdSchema, status: Obj, expected: list[str]) -> None:
    stored = run()
    obj = run() | {"status": status}

    error = refusal(runs, obj, old=stored, subresource="status")

    assert causes(error) == expected


# --- CEL rules of the CRDs -----------------------------------------------------------------


def guarded(window: str | None, keep: str | None) -> Callable[[Obj], None]:
    def mutate(obj: Obj) -> None:
        obj["spec"]["guard"] = {} if window is None else {"window": window}
        obj["spec"]["rollback"] = {} if keep is None else {"keepPreviousFor": keep}

    return mutate


RUN_RULES: list[Any] = [
    pytest.param(
        put("metadata.name", "r" * 41),
        "<nil>",
        NAME_LENGTH,
        id="name-length",
    ),
    pytest.param(
        put("metadata.name", "Review_Responder"),
        "<nil>",
        DNS_LABEL,
        id="name-dns-label",
    ),
    pytest.param(
        guarded("10m", None),
        "spec",
        GUARD,
        id="guard-without-keep",
    ),
    pytest.param(
        guarded("10m", "5m"),
        "spec",
        GUARD,
        id="guard-longer-than-keep",
    ),
    pytest.param(
        guarded(None, "4m"),
        "spec",
        GUARD,
        id="guard-default-window-longer-than-keep",
    ),
    pytest.param(
        put("spec.workflow.registry", "s3://microagents/team/../other"),
        "spec.workflow",
        "registry must not contain a '..' path segment",
        id="registry-dotdot",
    ),
    pytest.param(
        put("spec.replicas", {"min": 5, "max": 2}),
        "spec.replicas",
        "replicas.min must not exceed replicas.max",
        id="replicas-min-max",
    ),
    pytest.param(
        put("spec.replicas", {"min": 2}),
        "spec.replicas",
        "replicas.min must not exceed replicas.max",
        id="replicas-min-over-default-max",
    ),
    pytest.param(
        put("spec.canary.steps", [10, 50, 25]),
        "spec.canary",
        "canary.steps must ascend",
        id="steps-ascend",
    ),
    pytest.param(
        put("spec.canary.steps", [1, 2, 3, 4, 5, 6, 7, 8, 9, 9]),
        "spec.canary",
        "canary.steps must ascend",
        id="steps-ascend-last-pair",
    ),
    pytest.param(
        put("spec.smokeTest.golden", [{"name": "a", "input": {}, "expect": {}}]),
        "spec.smokeTest.golden[0].expect",
        "expect needs at least one rule (contains, notContains, matches or similarTo)",
        id="expect-empty",
    ),
    pytest.param(
        put(
            "spec.smokeTest.golden",
            [{"name": "a", "input": {}, "expect": {"contains": [], "notContains": []}}],
        ),
        "spec.smokeTest.golden[0].expect",
        "expect needs at least one rule (contains, notContains, matches or similarTo)",
        id="expect-empty-lists",
    ),
    pytest.param(
        put(
            "spec.smokeTest.golden",
            [{"name": "a", "input": {}, "expect": {"matches": "x", "minSimilarity": 0.5}}],
        ),
        "spec.smokeTest.golden[0].expect",
        "expect.minSimilarity is the threshold of similarTo; give similarTo too",
        id="min-similarity-without-similar-to",
    ),
]


@pytest.mark.parametrize(("mutate", "field", "message"), RUN_RULES)
def test_each_run_cel_rule_refuses(
    runs: CrdSchema, mutate: Callable[[Obj], None], field: str, message: str
) -> None:
    obj = run()
    mutate(obj)

    error = refusal(runs, obj)

    assert error.details["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": f'Invalid value: "object": {message}',
            "field": field,
        }
    ]
    name = obj["metadata"]["name"]
    assert (
        error.message
        == f'WorkflowRun.plnt.work "{name}" is invalid: {field}: Invalid value: "object": {message}'
    )


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(guarded("10m", "10m"), id="guard-equal-keep"),
        pytest.param(guarded(None, "1h"), id="guard-default-window"),
        pytest.param(guarded("90s", "2m"), id="guard-units"),
        pytest.param(put("spec.workflow.registry", "s3://microagents/a..b/c"), id="dots-in-a-name"),
        pytest.param(put("spec.replicas", {"min": 3, "max": 3}), id="replicas-equal"),
        pytest.param(put("spec.canary.steps", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]), id="ten-steps"),
        pytest.param(put("metadata.name", "r" * 40), id="name-40"),
        pytest.param(
            put(
                "spec.smokeTest.golden",
                [{"name": "a", "input": {}, "expect": {"similarTo": "x", "minSimilarity": 0.5}}],
            ),
            id="similarity-pair",
        ),
        pytest.param(
            put(
                "spec.smokeTest.golden",
                [{"name": "a", "input": {}, "expect": {"notContains": ["!"]}}],
            ),
            id="not-contains-alone",
        ),
    ],
)
def test_runs_keeping_the_cel_rules_are_admitted(
    runs: CrdSchema, mutate: Callable[[Obj], None]
) -> None:
    obj = run()
    mutate(obj)

    stored, _ = admit(runs, obj)

    assert stored["metadata"] == obj["metadata"]


def kubernetes_backend(kubernetes: Obj | None) -> Callable[[Obj], None]:
    def mutate(obj: Obj) -> None:
        obj["spec"]["type"] = "kubernetes"
        if kubernetes is not None:
            obj["spec"]["kubernetes"] = kubernetes

    return mutate


SECRET = {"name": "kc", "key": "config"}
BACKEND_RULES: list[Any] = [
    pytest.param(
        put("metadata.name", "b" * 64),
        "<nil>",
        "metadata.name must be at most 63 characters",
        id="name-length",
    ),
    pytest.param(
        put("metadata.name", "-backend"),
        "<nil>",
        DNS_LABEL,
        id="name-dns-label",
    ),
    pytest.param(
        kubernetes_backend(None),
        "spec",
        "type kubernetes needs spec.kubernetes (inCluster or kubeconfigSecretRef)",
        id="kubernetes-needs-target",
    ),
    pytest.param(
        kubernetes_backend({}),
        "spec.kubernetes",
        "kubernetes needs exactly one of inCluster true or kubeconfigSecretRef",
        id="neither-in-cluster-nor-secret",
    ),
    pytest.param(
        kubernetes_backend({"inCluster": True, "kubeconfigSecretRef": SECRET}),
        "spec.kubernetes",
        "kubernetes needs exactly one of inCluster true or kubeconfigSecretRef",
        id="both-in-cluster-and-secret",
    ),
]


@pytest.mark.parametrize(("mutate", "field", "message"), BACKEND_RULES)
def test_each_backend_cel_rule_refuses(
    backends: CrdSchema, mutate: Callable[[Obj], None], field: str, message: str
) -> None:
    obj = backend()
    mutate(obj)

    error = refusal(backends, obj)

    assert causes(error) == [f'{field}: Invalid value: "object": {message}']


@pytest.mark.parametrize(
    "kubernetes",
    [
        pytest.param({"inCluster": True}, id="in-cluster"),
        pytest.param({"kubeconfigSecretRef": SECRET}, id="secret"),
    ],
)
def test_kubernetes_backends_with_one_target_are_admitted(
    backends: CrdSchema, kubernetes: Obj
) -> None:
    obj = backend()
    kubernetes_backend(kubernetes)(obj)

    stored, _ = admit(backends, obj)

    assert stored["spec"]["type"] == "kubernetes"


def test_cel_rules_hold_on_update_too(runs: CrdSchema) -> None:
    old = run()
    obj = run()
    obj["spec"]["replicas"] = {"min": 9, "max": 4}

    assert causes(refusal(runs, obj, old=old)) == [
        'spec.replicas: Invalid value: "object": replicas.min must not exceed replicas.max'
    ]


def test_blocking_errors_skip_the_cel_rules(runs: CrdSchema) -> None:
    obj = run()
    obj["spec"]["replicas"] = {"min": 9, "max": 4}
    obj["spec"]["backend"]["cluster"] = "c" * 64

    assert causes(refusal(runs, obj)) == [
        "spec.backend.cluster: Too long: may not be more than 63 bytes",
        NOT_CHECKED,
    ]


# --- rule features the project's CRDs do not use yet -------------------------------------

SYNTHETIC: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {
                    "rule": "self.count + 1 > 2",
                    "messageExpression": "'count is ' + string(self.count)",
                },
                {
                    "rule": "has(self.owner)",
                    "message": "owner is required",
                    "fieldPath": ".owner",
                    "reason": "FieldValueRequired",
                },
                {"rule": "self.ratio < 1.0", "fieldPath": ".ratio"},
            ],
            "properties": {
                "count": {"type": "integer", "default": 2},
                "ratio": {"type": "number", "default": 0},
                "owner": {
                    "type": "string",
                    "x-kubernetes-validations": [
                        {"rule": "self == oldSelf", "message": "owner is immutable"}
                    ],
                },
                "port": {"x-kubernetes-int-or-string": True},
                "note": {"type": "string", "nullable": True},
                "labels": {
                    "type": "object",
                    "maxProperties": 2,
                    "additionalProperties": {"type": "string"},
                },
            },
        },
    },
}


@pytest.fixture(scope="module")
def widgets() -> CrdSchema:
    return CrdSchema(kind="Widget", group="example.com", schema=SYNTHETIC)


def widget(**spec: Any) -> Obj:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"owner": "me", **spec},
    }


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            {"count": 1}, ['spec: Invalid value: "object": count is 1'], id="message-expression-int"
        ),
        pytest.param(
            {"owner": None},
            ["spec.owner: Required value: owner is required"],
            id="reason-and-field-path",
        ),
        pytest.param(
            {"ratio": 1},
            ['spec.ratio: Invalid value: "object": failed rule: self.ratio < 1.0'],
            id="number-is-double",
        ),
        pytest.param(
            {"port": True},
            [
                mistyped("spec.port", "integer,string", "boolean"),
                NOT_CHECKED,
            ],
            id="int-or-string",
        ),
        pytest.param(
            {"labels": {"a": "1", "b": "2", "c": "3"}},
            ["spec.labels: Too many: 3: must have at most 2 items", NOT_CHECKED],
            id="max-properties",
        ),
    ],
)
def test_rule_features(widgets: CrdSchema, spec: Obj, expected: list[str]) -> None:
    assert causes(refusal(widgets, widget(**spec))) == expected


@pytest.mark.parametrize("spec", [{"port": 80}, {"port": "http"}, {"note": None}, {"ratio": 0.5}])
def test_allowed_values_pass(widgets: CrdSchema, spec: Obj) -> None:
    stored, _ = admit(widgets, widget(**spec))

    assert stored["spec"] == {"owner": "me", "count": 2, "ratio": 0, **spec}


def test_transition_rules_run_only_on_update(widgets: CrdSchema) -> None:
    admit(widgets, widget(owner="you"))  # created: no oldSelf, the rule is not run
    admit(widgets, widget(owner="me"), old=widget(owner="me"))

    error = refusal(widgets, widget(owner="you"), old=widget(owner="me"))

    assert causes(error) == ['spec.owner: Invalid value: "string": owner is immutable']


@pytest.mark.parametrize("mode", ["Strict", "Warn", "Ignore"])
def test_invalid_beats_nothing_but_strict_unknown_fields(
    widgets: CrdSchema, mode: FieldValidation
) -> None:
    obj = widget(count=0, typo=1)

    error = refusal(widgets, obj, field_validation=mode)

    assert error.code == (400 if mode == "Strict" else 422)
