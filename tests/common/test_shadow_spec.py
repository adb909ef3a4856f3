"""spec.canary.shadow: its defaults, and one message naming the field for each bad value."""

from typing import Any

import pytest

from plnt_common.errors import SpecInvalid
from plnt_common.resources import WorkflowRun, parse_resource


def run(shadow: dict[str, Any] | None) -> dict[str, Any]:
    canary = {"shadow": shadow} if shadow is not None else {}
    return {
        "apiVersion": "plnt.work/v1",
        "kind": "WorkflowRun",
        "metadata": {"name": "shop"},
        "spec": {
            "workflow": {"ref": "shop@1.0.0", "registry": "s3://bucket"},
            "backend": {"cluster": "c"},
            "canary": canary,
        },
    }


def test_the_defaults_are_the_contracts_and_percent_0_is_off() -> None:
    parsed = parse_resource(run({}))
    assert isinstance(parsed, WorkflowRun)
    shadow = parsed.spec.canary.shadow
    assert shadow is not None and not parsed.spec.canary.shadowed
    assert (shadow.percent, shadow.calls, shadow.max_duration_s, shadow.budget_usd) == (
        0,
        200,
        600.0,
        None,
    )
    compare = shadow.compare
    assert (
        compare.min_similarity,
        compare.max_similarity_drop,
        compare.max_cost_ratio,
        compare.max_p95_ratio,
        compare.max_error_percent_delta,
        compare.max_tool_call_diff_percent,
    ) == (0.85, 0.02, 1.1, 1.2, 1, 2)
    without = parse_resource(run(None))
    assert isinstance(without, WorkflowRun) and not without.spec.canary.shadowed
    on = parse_resource(run({"percent": 20}))
    assert isinstance(on, WorkflowRun) and on.spec.canary.shadowed


@pytest.mark.parametrize(
    ("shadow", "message"),
    [
        ({"percent": 101}, "spec.canary.shadow.percent: Input should be less than or equal to 100"),
        ({"calls": 0}, "spec.canary.shadow.calls: Input should be greater than or equal to 1"),
        (
            {"maxDuration": "10x"},
            "spec.canary.shadow.maxDuration: must be a duration like 500ms, 30s or 5m, got '10x'",
        ),
        (
            {"maxDuration": "48h"},
            "spec.canary.shadow.maxDuration: must be between 1s and 24h, got '48h'",
        ),
        ({"budgetUsd": 0}, "spec.canary.shadow.budgetUsd: Input should be greater than 0"),
        (
            {"compare": {"minSimilarity": 1.5}},
            "spec.canary.shadow.compare.minSimilarity: Input should be less than or equal to 1",
        ),
        (
            {"compare": {"maxCostRatio": 0}},
            "spec.canary.shadow.compare.maxCostRatio: Input should be greater than 0",
        ),
        ({"persent": 5}, "spec.canary.shadow.persent: Extra inputs are not permitted"),
    ],
    ids=[
        "percent",
        "calls",
        "duration-shape",
        "duration-range",
        "budget",
        "similarity",
        "ratio",
        "typo",
    ],
)
def test_a_bad_value_is_one_message_naming_the_field(shadow: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecInvalid) as raised:
        parse_resource(run(shadow))
    assert str(raised.value) == f"WorkflowRun 'shop': {message}"
