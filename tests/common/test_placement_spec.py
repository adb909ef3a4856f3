"""``spec.placement`` in the model and the CRD: the shared example is accepted by both, and
each refusal is one line naming the fields (DESIGN.md section 13)."""

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from plnt_common.resources import WorkflowRun, parse_resource
from plnt_testkit.kube_emulator.schema import CrdSchema
from plnt_testkit.kube_emulator.types import ApiError

ROOT = Path(__file__).resolve().parents[2]
SHARED_EXAMPLE = Path("/work/shared/examples/workflowrun-placement-shadow.yaml")


def runs_schema() -> CrdSchema:
    crd = yaml.safe_load((ROOT / "crds" / "workflowruns.plnt.work.yaml").read_text())
    version = next(v for v in crd["spec"]["versions"] if v["served"] and v["storage"])
    return CrdSchema(
        kind="WorkflowRun", group="plnt.work", schema=version["schema"]["openAPIV3Schema"]
    )


def run(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "plnt.work/v1",
        "kind": "WorkflowRun",
        "metadata": {"name": "placed", "namespace": "default"},
        "spec": {"workflow": {"ref": "a@1.0.0", "registry": "oci://r.example/x"}, **spec},
    }


def model_refusal(obj: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        WorkflowRun.model_validate(obj)
    return str(caught.value)


def crd_refusal(obj: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as caught:
        runs_schema().admit(obj, old=None, field_validation="Strict")
    return caught.value.message


@pytest.mark.skipif(not SHARED_EXAMPLE.exists(), reason="the shared example is not here")
def test_the_shared_example_is_accepted_by_the_model_and_the_crd() -> None:
    doc = yaml.safe_load(SHARED_EXAMPLE.read_text())
    doc["metadata"].setdefault("namespace", "default")

    parsed = parse_resource(doc)
    runs_schema().admit(doc, old=None, field_validation="Strict")

    assert isinstance(parsed, WorkflowRun)
    assert parsed.spec.placement is not None and parsed.spec.placement.failover
    assert parsed.spec.candidates == ("gpu-east", "gpu-west", "burst")


def test_a_selector_placement_is_accepted() -> None:
    obj = run(placement={"selector": {"matchLabels": {"tier": "gpu"}}})

    parsed = WorkflowRun.model_validate(obj)
    runs_schema().admit(obj, old=None, field_validation="Strict")

    assert parsed.spec.placement is not None and parsed.spec.placement.spread == 1


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(
            {"backend": {"cluster": "a"}, "placement": {"backends": ["b"]}},
            "spec.backend.cluster and spec.placement exclude each other",
            id="both",
        ),
        pytest.param({}, "spec.backend.cluster or spec.placement is required", id="neither"),
        pytest.param(
            {"placement": {"backends": ["a"], "selector": {"matchLabels": {"t": "g"}}}},
            "spec.placement needs exactly one of backends and selector",
            id="backends-and-selector",
        ),
        pytest.param(
            {"placement": {"backends": ["a", "b"], "spread": 3}},
            "spec.placement.spread exceeds the number of backends listed",
            id="spread-beyond-backends",
        ),
        pytest.param(
            {
                "placement": {"backends": ["a", "b"], "spread": 2},
                "rollback": {"keepPreviousFor": "1m"},
            },
            "spec.placement.spread above 1 with spec.rollback.keepPreviousFor is not supported",
            id="spread-with-kept-previous",
        ),
    ],
)
def test_each_refusal_is_one_line_in_the_model_and_the_crd(
    spec: dict[str, Any], message: str
) -> None:
    assert message in model_refusal(run(**spec))
    crd_message = crd_refusal(run(**spec))
    assert message in crd_message and "\n" not in crd_message
