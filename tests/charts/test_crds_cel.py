"""Every CEL rule (`x-kubernetes-validations`) of the plnt CRDs, evaluated with cel-python on
`self` values that must pass and values that must fail. A rule added to a CRD without
cases here fails test_every_rule_of_the_crds_has_cases."""

from typing import Any

import celpy
import pytest
from plnt_chart_kit import CRD_FILES, cel_rules, compile_cel, crd_schema, eval_cel

NAME_40 = "self.metadata.name.size() <= 40"
NAME_63 = "self.metadata.name.size() <= 63"
NAME_DNS = "self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')"
NO_DOTDOT = "!self.registry.matches('(^|/)[.][.](/|$)')"
PULL_SECRET_OCI = "!has(self.pullSecret) || self.registry.startsWith('oci://')"
MIN_LE_MAX = "self.min <= self.max"
TRAFFIC = "self.trafficPercent >= 0 && self.trafficPercent <= 100"
K8S_TARGET = "self.type != 'kubernetes' || has(self.kubernetes)"
ONE_CREDENTIAL = "self.inCluster != has(self.kubeconfigSecretRef)"
GOLDEN_HAS_A_RULE = (
    "(has(self.contains) && size(self.contains) > 0) "
    "|| (has(self.notContains) && size(self.notContains) > 0) "
    "|| has(self.matches) || has(self.similarTo)"
)
THRESHOLD_NEEDS_REFERENCE = "!has(self.minSimilarity) || has(self.similarTo)"
STEPS_ASCEND = (
    "!has(self.steps) || ("
    + " && ".join(
        f"(size(self.steps) <= {i + 1} || self.steps[{i}] < self.steps[{i + 1}])" for i in range(9)
    )
    + ")"
)

GUARD_NEEDS_KEEP = (
    "!has(self.guard) || (has(self.rollback) && has(self.rollback.keepPreviousFor)"
    " && duration(self.rollback.keepPreviousFor)"
    " >= duration(has(self.guard.window) ? self.guard.window : '5m'))"
)

PLACEMENT_EXCLUDES_CLUSTER = (
    "!(has(self.placement) && has(self.backend) && has(self.backend.cluster))"
)
PLACEMENT_OR_CLUSTER = "has(self.placement) || (has(self.backend) && has(self.backend.cluster))"
PLACEMENT_ONE_WAY = "has(self.backends) != has(self.selector)"
PLACEMENT_SPREAD_FITS = (
    "!has(self.spread) || !has(self.backends) || self.spread <= size(self.backends)"
)
SPREAD_WITHOUT_KEEP = (
    "!has(self.placement) || !has(self.placement.spread) || self.placement.spread <= 1"
    " || !has(self.rollback) || !has(self.rollback.keepPreviousFor)"
)


def _named(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {}}


# rule -> (self values that pass, self values that fail)
SELECTOR_VALUES = (
    "(self.operator in ['In', 'NotIn']) == (has(self.values) && size(self.values) > 0)"
)

RUNNER_CALLER = "has(self.ipBlock) != (has(self.namespaceSelector) || has(self.podSelector))"

CASES: dict[str, tuple[list[Any], list[Any]]] = {
    RUNNER_CALLER: (
        [
            {"ipBlock": {"cidr": "10.8.0.0/16"}},
            {"namespaceSelector": {"matchLabels": {"name": "mcs-gateway"}}},
            {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "gateway"}}},
        ],
        [{}, {"ipBlock": {"cidr": "10.8.0.0/16"}, "podSelector": {}}],
    ),
    SELECTOR_VALUES: (
        [
            {"key": "team", "operator": "In", "values": ["a"]},
            {"key": "team", "operator": "NotIn", "values": ["a", "b"]},
            {"key": "team", "operator": "Exists"},
            {"key": "team", "operator": "DoesNotExist", "values": []},
        ],
        [
            {"key": "team", "operator": "In"},
            {"key": "team", "operator": "NotIn", "values": []},
            {"key": "team", "operator": "Exists", "values": ["a"]},
        ],
    ),
    NAME_40: (
        [_named("review-responder"), _named("a" * 40), _named("a")],
        [_named("a" * 41), _named("review-responder-for-the-whole-brand-portfolio")],
    ),
    NAME_63: ([_named("a" * 63), _named("gpu-cluster-01")], [_named("a" * 64)]),
    NAME_DNS: (
        [_named("review-responder"), _named("a1"), _named("0")],
        [
            _named("Review"),
            _named("review_responder"),
            _named("-review"),
            _named("review-"),
            _named("review.responder"),
            _named(""),
        ],
    ),
    NO_DOTDOT: (
        [
            {"registry": "s3://bucket/a..b"},
            {"registry": "file:///srv/registry"},
            {"registry": "oci://ghcr.io/org/specs..v2"},
        ],
        [
            {"registry": "s3://bucket/../other"},
            {"registry": "file:///srv/.."},
            {"registry": "file:///../etc"},
        ],
    ),
    PULL_SECRET_OCI: (
        [
            {"registry": "oci://ghcr.io/org/specs", "pullSecret": {"name": "regcred"}},
            {"registry": "s3://bucket/specs"},
            {"registry": "file:///srv/registry"},
        ],
        [
            {"registry": "s3://bucket/specs", "pullSecret": {"name": "regcred"}},
            {"registry": "file:///srv/registry", "pullSecret": {"name": "regcred"}},
        ],
    ),
    MIN_LE_MAX: (
        [{"min": 1, "max": 1}, {"min": 0, "max": 4}, {"min": 3, "max": 1000}],
        [{"min": 5, "max": 2}, {"min": 1000, "max": 1}],
    ),
    TRAFFIC: (
        [{"trafficPercent": 0}, {"trafficPercent": 5}, {"trafficPercent": 100}],
        [{"trafficPercent": 101}, {"trafficPercent": -1}],
    ),
    K8S_TARGET: (
        [
            {"type": "local"},
            {"type": "kubernetes", "kubernetes": {"inCluster": True}},
        ],
        [{"type": "kubernetes"}],
    ),
    ONE_CREDENTIAL: (
        [
            {"inCluster": True, "namespace": "default"},
            {"inCluster": False, "kubeconfigSecretRef": {"name": "c", "key": "k"}},
        ],
        [
            {"inCluster": False, "namespace": "default"},
            {"inCluster": True, "kubeconfigSecretRef": {"name": "c", "key": "k"}},
        ],
    ),
    GOLDEN_HAS_A_RULE: (
        [
            {"contains": ["parking"]},
            {"notContains": ["refund"]},
            {"matches": "(?i)thank"},
            {"similarTo": "Thanks for the kind words", "minSimilarity": 0.6},
            {"contains": [], "matches": "x"},
        ],
        [{}, {"contains": []}, {"contains": [], "notContains": []}, {"minSimilarity": 0.5}],
    ),
    STEPS_ASCEND: (
        [
            {},
            {"steps": []},
            {"steps": [50]},
            {"steps": [10, 25, 50]},
            {"steps": list(range(1, 11))},
        ],
        [{"steps": [25, 10]}, {"steps": [10, 10]}, {"steps": [*range(1, 10), 5]}],
    ),
    GUARD_NEEDS_KEEP: (
        [
            {},
            {"rollback": {"keepPreviousFor": "1m"}},
            {"guard": {"window": "30s"}, "rollback": {"keepPreviousFor": "30s"}},
            {"guard": {"window": "90s"}, "rollback": {"keepPreviousFor": "1.5m"}},
            {"guard": {}, "rollback": {"keepPreviousFor": "10m"}},
        ],
        [
            {"guard": {}},
            {"guard": {"window": "30s"}, "rollback": {}},
            {"guard": {"window": "10m"}, "rollback": {"keepPreviousFor": "9m"}},
            {"guard": {}, "rollback": {"keepPreviousFor": "4m"}},
            {"guard": {"window": "500ms"}, "rollback": {"keepPreviousFor": "400ms"}},
        ],
    ),
    THRESHOLD_NEEDS_REFERENCE: (
        [{"similarTo": "x", "minSimilarity": 0.5}, {"similarTo": "x"}, {"contains": ["x"]}],
        [{"minSimilarity": 0.5}, {"contains": ["x"], "minSimilarity": 0.9}],
    ),
    PLACEMENT_EXCLUDES_CLUSTER: (
        [{"placement": {"backends": ["a"]}}, {"backend": {"cluster": "a"}}, {"backend": {}}],
        [{"placement": {"backends": ["a"]}, "backend": {"cluster": "b"}}],
    ),
    PLACEMENT_OR_CLUSTER: (
        [{"placement": {"backends": ["a"]}}, {"backend": {"cluster": "a"}}],
        [{}, {"backend": {}}, {"backend": {"gpuCount": 1}}],
    ),
    PLACEMENT_ONE_WAY: (
        [{"backends": ["a"]}, {"selector": {"matchLabels": {"tier": "gpu"}}}],
        [{}, {"backends": ["a"], "selector": {"matchLabels": {"tier": "gpu"}}}],
    ),
    PLACEMENT_SPREAD_FITS: (
        [
            {"backends": ["a"]},
            {"backends": ["a", "b"], "spread": 2},
            {"selector": {"matchLabels": {"tier": "gpu"}}, "spread": 3},
        ],
        [{"backends": ["a"], "spread": 2}, {"backends": ["a", "b"], "spread": 3}],
    ),
    SPREAD_WITHOUT_KEEP: (
        [
            {"placement": {"backends": ["a", "b"], "spread": 2}},
            {"placement": {"backends": ["a"], "spread": 1}, "rollback": {"keepPreviousFor": "1m"}},
            {"backend": {"cluster": "a"}, "rollback": {"keepPreviousFor": "1m"}},
        ],
        [
            {
                "placement": {"backends": ["a", "b"], "spread": 2},
                "rollback": {"keepPreviousFor": "1m"},
            }
        ],
    ),
}


def _all_rules() -> list[tuple[str, tuple[str, ...], dict[str, Any]]]:
    return [
        (kind, path, rule)
        for kind in sorted(CRD_FILES)
        for path, rule in cel_rules(crd_schema(kind))
    ]


def test_every_rule_of_the_crds_has_cases() -> None:
    assert {rule["rule"] for _, _, rule in _all_rules()} == set(CASES)


@pytest.mark.parametrize(
    ("kind", "path", "rule"),
    _all_rules(),
    ids=[f"{kind}:{'.'.join(path) or 'root'}:{rule['rule']}" for kind, path, rule in _all_rules()],
)
def test_rule_compiles_and_has_a_message(
    kind: str, path: tuple[str, ...], rule: dict[str, Any]
) -> None:
    compile_cel(rule["rule"])
    assert rule.get("message"), f"{kind} {'.'.join(path)}: give the rule a message users can act on"


@pytest.mark.parametrize(
    ("rule", "value"),
    [(rule, value) for rule, (good, _) in CASES.items() for value in good],
)
def test_rule_admits_good_values(rule: str, value: Any) -> None:
    assert eval_cel(rule, value) is True


@pytest.mark.parametrize(
    ("rule", "value"),
    [(rule, value) for rule, (_, bad) in CASES.items() for value in bad],
)
def test_rule_rejects_bad_values(rule: str, value: Any) -> None:
    assert eval_cel(rule, value) is False


def test_root_rules_cover_the_name_rules_the_contract_asks_for() -> None:
    root = [rule["rule"] for path, rule in cel_rules(crd_schema("WorkflowRun")) if path == ()]
    assert root == [NAME_40, NAME_DNS]
    placed = {rule["rule"]: path for path, rule in cel_rules(crd_schema("WorkflowRun"))}
    assert placed[MIN_LE_MAX] == ("spec", "replicas")
    assert placed[TRAFFIC] == ("spec", "canary")
    assert placed[NO_DOTDOT] == ("spec", "workflow")
    golden_expect = ("spec", "smokeTest", "golden", "[]", "expect")
    assert placed[GOLDEN_HAS_A_RULE] == golden_expect
    assert placed[THRESHOLD_NEEDS_REFERENCE] == golden_expect


def test_a_broken_rule_does_not_compile() -> None:
    with pytest.raises(celpy.CELParseError):
        compile_cel("self.min <= ")
