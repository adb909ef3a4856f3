"""Label selectors as Kubernetes evaluates them (allowedNamespaces)."""

import pytest

from plnt_common.label_selector import describe, selects
from plnt_common.resources import LabelSelector

TEAM_A = {"team": "a", "tier": "prod"}


def selector(**fields: object) -> LabelSelector:
    return LabelSelector.model_validate(fields)


@pytest.mark.parametrize(
    ("fields", "labels", "selected"),
    [
        ({}, {}, True),
        ({}, TEAM_A, True),
        ({"matchLabels": {"team": "a"}}, TEAM_A, True),
        ({"matchLabels": {"team": "b"}}, TEAM_A, False),
        ({"matchLabels": {"team": "a"}}, {}, False),
        ({"matchLabels": {"team": "a", "tier": "dev"}}, TEAM_A, False),
    ],
)
def test_match_labels_all_must_equal(fields: dict, labels: dict, selected: bool) -> None:
    assert selects(selector(**fields), labels) is selected


def expression(operator: str, *values: str, key: str = "tier") -> LabelSelector:
    return selector(matchExpressions=[{"key": key, "operator": operator, "values": list(values)}])


@pytest.mark.parametrize(
    ("chosen", "labels", "selected"),
    [
        (expression("In", "prod", "staging"), TEAM_A, True),
        (expression("In", "dev"), TEAM_A, False),
        (expression("In", "prod"), {}, False),
        (expression("NotIn", "dev"), TEAM_A, True),
        (expression("NotIn", "prod"), TEAM_A, False),
        (expression("NotIn", "prod"), {}, True),
        (expression("Exists"), TEAM_A, True),
        (expression("Exists"), {"team": "a"}, False),
        (expression("DoesNotExist"), {"team": "a"}, True),
        (expression("DoesNotExist"), TEAM_A, False),
    ],
)
def test_each_operator_as_kubernetes_means_it(
    chosen: LabelSelector, labels: dict, selected: bool
) -> None:
    assert selects(chosen, labels) is selected


def test_labels_and_expressions_are_anded() -> None:
    both = selector(
        matchLabels={"team": "a"},
        matchExpressions=[{"key": "tier", "operator": "In", "values": ["dev"]}],
    )
    assert not selects(both, TEAM_A)
    assert selects(both, {"team": "a", "tier": "dev"})


def test_a_selector_is_described_as_kubectl_writes_it() -> None:
    chosen = selector(
        matchLabels={"team": "a"},
        matchExpressions=[
            {"key": "tier", "operator": "In", "values": ["x", "y"]},
            {"key": "old", "operator": "DoesNotExist"},
            {"key": "gpu", "operator": "Exists"},
            {"key": "zone", "operator": "NotIn", "values": ["z"]},
        ],
    )
    assert describe(chosen) == "team=a,tier in (x,y),!old,gpu,zone notin (z)"
    assert describe(selector()) == "(everything)"
