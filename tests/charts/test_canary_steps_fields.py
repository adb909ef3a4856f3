"""spec.canary.steps, stepInterval and analysis: defaults, and every bad input refused in one
line naming the field; the CRD schema admits and refuses the same."""

from typing import Any

import pytest
from plnt_chart_kit import admission_errors

from plnt_common.errors import SpecInvalid
from plnt_common.resources import WorkflowRun, parse_resource


def run_with(canary: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "plnt.work/v1",
        "kind": "WorkflowRun",
        "metadata": {"name": "wf"},
        "spec": {
            "workflow": {"ref": "wf@1.0.0", "registry": "s3://bucket"},
            "backend": {"cluster": "local"},
            "canary": canary,
        },
    }


def test_a_run_without_steps_has_none_and_keeps_the_old_canary() -> None:
    run = parse_resource(run_with({"trafficPercent": 5}))
    assert isinstance(run, WorkflowRun)
    assert run.spec.canary.steps == ()
    assert run.spec.canary.step_interval_s == 60.0


def test_the_examples_fields_parse_into_seconds_and_budgets() -> None:
    run = parse_resource(
        run_with(
            {
                "steps": [10, 25, 50],
                "stepInterval": "500ms",
                "analysis": {
                    "minInvocations": 50,
                    "maxErrorPercent": 0,
                    "maxP95Ms": 2500,
                    "maxP95RatioToStable": 1.3,
                    "maxTokensPerInvocation": 3000,
                    "maxCostPerInvocationUsd": 0.01,
                },
            }
        )
    )
    assert isinstance(run, WorkflowRun)
    assert run.spec.canary.steps == (10, 25, 50)
    assert run.spec.canary.step_interval_s == 0.5
    assert run.spec.canary.analysis.max_p95_ratio_to_stable == 1.3
    assert not admission_errors("WorkflowRun", run_with({"steps": [10, 25, 50]}))


BAD = [
    ({"steps": [25, 10]}, "spec.canary.steps: must ascend, got [25, 10]"),
    ({"steps": [10, 10]}, "spec.canary.steps: must ascend, got [10, 10]"),
    ({"steps": [0, 10]}, "spec.canary.steps: each step must be 1..99, got [0, 10]"),
    ({"steps": [10, 100]}, "spec.canary.steps: each step must be 1..99, got [10, 100]"),
    ({"steps": list(range(1, 12))}, "spec.canary.steps: Tuple should have at most 10 items"),
    ({"steps": "10"}, "spec.canary.steps: Input should be a valid tuple"),
    (
        {"stepInterval": "30"},
        "spec.canary.stepInterval: must be a duration like 500ms, 30s or 5m, got '30'",
    ),
    (
        {"stepInterval": "5 m"},
        "spec.canary.stepInterval: must be a duration like 500ms, 30s or 5m, got '5 m'",
    ),
    ({"stepInterval": "10ms"}, "spec.canary.stepInterval: must be between 100ms and 24h"),
    ({"stepInterval": "25h"}, "spec.canary.stepInterval: must be between 100ms and 24h"),
    ({"analysis": {"minInvocations": 0}}, "spec.canary.analysis.minInvocations: Input should"),
    ({"analysis": {"maxErrorPercent": 101}}, "spec.canary.analysis.maxErrorPercent: Input"),
    ({"analysis": {"maxErrorPercent": -1}}, "spec.canary.analysis.maxErrorPercent: Input"),
    ({"analysis": {"maxP95Ms": 0}}, "spec.canary.analysis.maxP95Ms: Input should"),
    ({"analysis": {"maxP95RatioToStable": 0}}, "spec.canary.analysis.maxP95RatioToStable:"),
    ({"analysis": {"maxTokensPerInvocation": -5}}, "spec.canary.analysis.maxTokensPerInvocation"),
    ({"analysis": {"maxCostPerInvocationUsd": 0}}, "spec.canary.analysis.maxCostPerInvocationUsd"),
    ({"analysis": {"window": "1m"}}, "spec.canary.analysis.window: Extra inputs are not permitted"),
    ({"manualGate": "soon"}, "spec.canary.manualGate: Input should be a valid boolean"),
]


@pytest.mark.parametrize(("canary", "message"), BAD, ids=[m.split(":")[0] + str(c) for c, m in BAD])
def test_bad_canary_fields_are_refused_in_one_line_naming_the_field(
    canary: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecInvalid) as refused:
        parse_resource(run_with(canary))
    text = str(refused.value)
    assert "\n" not in text
    assert text.startswith(f"WorkflowRun 'wf': {message}"), text


@pytest.mark.parametrize(
    "canary",
    [
        {"steps": [25, 10]},
        {"steps": [0, 10]},
        {"steps": [10, 100]},
        {"steps": list(range(1, 12))},
        {"stepInterval": "30"},
        {"analysis": {"maxErrorPercent": 101}},
        {"analysis": {"minInvocations": 0}},
        {"analysis": {"maxP95Ms": 0}},
    ],
    ids=str,
)
def test_the_crd_refuses_what_the_model_refuses(canary: dict[str, Any]) -> None:
    assert admission_errors("WorkflowRun", run_with(canary))


def run_with_spec(**fields: Any) -> dict[str, Any]:
    run = run_with({})
    run["spec"].update(fields)
    return run


def test_guard_and_rollback_are_optional_and_read_as_seconds() -> None:
    bare = parse_resource(run_with({}))
    assert isinstance(bare, WorkflowRun)
    assert bare.spec.guard is None
    assert bare.spec.rollback.keep_previous_s == 0
    assert bare.spec.canary.manual_gate is False
    run = parse_resource(
        run_with_spec(
            guard={"window": "30s", "maxErrorPercent": 5, "maxP95Ms": 900},
            rollback={"keepPreviousFor": "10m"},
        )
    )
    assert isinstance(run, WorkflowRun)
    assert run.spec.guard is not None
    assert run.spec.guard.window_s == 30
    assert run.spec.rollback.keep_previous_s == 600


BAD_SPEC: list[tuple[dict[str, Any], str]] = [
    ({"guard": {"window": "5"}}, "spec.guard.window: must be a duration like 500ms, 30s or 5m"),
    ({"guard": {"window": "25h"}}, "spec.guard.window: must be between 100ms and 24h"),
    ({"guard": {"maxErrorPercent": 101}}, "spec.guard.maxErrorPercent: Input should"),
    ({"guard": {"maxP95Ms": 0}}, "spec.guard.maxP95Ms: Input should"),
    ({"guard": {"budget": 1}}, "spec.guard.budget: Extra inputs are not permitted"),
    (
        {"rollback": {"keepPreviousFor": "ten minutes"}},
        "spec.rollback.keepPreviousFor: must be a duration like 500ms, 30s or 5m",
    ),
    ({"rollback": {"keepPreviousFor": "8d"}}, "spec.rollback.keepPreviousFor: must be a duration"),
    ({"rollback": {"keepPreviousFor": "500ms"}}, "spec.rollback.keepPreviousFor: must be between"),
    (
        {"guard": {"window": "5m"}},
        "spec: guard.window (5m) needs rollback.keepPreviousFor of at least as long",
    ),
    (
        {"guard": {"window": "5m"}, "rollback": {"keepPreviousFor": "1m"}},
        "spec: guard.window (5m) needs rollback.keepPreviousFor of at least as long",
    ),
]


@pytest.mark.parametrize(("fields", "message"), BAD_SPEC, ids=[m for _, m in BAD_SPEC])
def test_bad_guard_and_rollback_fields_are_refused_naming_the_field(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecInvalid) as refused:
        parse_resource(run_with_spec(**fields))
    text = str(refused.value)
    assert "\n" not in text
    assert text.startswith(f"WorkflowRun 'wf': {message}"), text


@pytest.mark.parametrize(
    "fields",
    [
        {"guard": {"window": "5"}},
        {"guard": {"maxErrorPercent": 101}},
        {"guard": {"maxP95Ms": 0}},
        {"rollback": {"keepPreviousFor": "ten minutes"}},
        {"canary": {"manualGate": "soon"}},
        {"guard": {"window": "5m"}},
        {"guard": {"window": "5m"}, "rollback": {"keepPreviousFor": "1m"}},
        {"guard": {}, "rollback": {"keepPreviousFor": "4m"}},
    ],
    ids=str,
)
def test_the_crd_refuses_the_bad_new_fields_too(fields: dict[str, Any]) -> None:
    assert admission_errors("WorkflowRun", run_with_spec(**fields))


def test_the_crd_admits_a_guard_with_a_long_enough_keep() -> None:
    for fields in (
        {"guard": {"window": "90s"}, "rollback": {"keepPreviousFor": "1.5m"}},
        {"guard": {}, "rollback": {"keepPreviousFor": "5m"}},
    ):
        run = run_with_spec(**fields)
        parse_resource(run)
        assert admission_errors("WorkflowRun", run) == [], fields
