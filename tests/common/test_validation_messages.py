"""One message per problem in a refused spec: when an item of a list fails, pydantic's
follow-on complaint that the list it left empty is too short is not shown; an empty list
given as such is still refused in its own words."""

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, Field, ValidationError

from plnt_common.errors import SpecInvalid
from plnt_common.resources import parse_resource
from plnt_common.workflow import describe_validation_error, parse_workflow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WORKFLOW = (EXAMPLES / "registry" / "review-responder" / "1.2.0" / "workflow.yaml").read_bytes()
STEP_ID = "spec.steps[0].id: String should match pattern '^[a-z][a-z0-9_]{0,62}$'"
FOLLOW_ON = "should have at least 1 item after validation"


def workflow_with(steps: list[dict[str, Any]]) -> bytes:
    document = yaml.safe_load(WORKFLOW)
    document["spec"]["steps"] = steps
    return yaml.safe_dump(document).encode()


def refusal(raw: bytes) -> str:
    with pytest.raises(SpecInvalid) as error:
        parse_workflow(raw)
    return str(error.value)


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([{"id": "A", "tool": "llm.generate"}], f"spec is invalid: {STEP_ID}"),
        (
            [{"id": "a", "tool": "http.request"}],
            "spec is invalid: spec.steps[0]: step 'a' (http.request) needs with.url, an"
            " http(s) URL",
        ),
        (
            [{"id": "A", "tool": "llm.generate"}, {"id": "b", "tool": "http.request"}],
            f"spec is invalid: {STEP_ID}; spec.steps[1]: step 'b' (http.request) needs"
            " with.url, an http(s) URL",
        ),
    ],
    ids=["the-only-step-refused", "its-with-refused", "every-step-refused"],
)
def test_a_workflow_whose_steps_are_all_refused_names_only_their_problems(
    steps: list[dict[str, Any]], message: str
) -> None:
    assert refusal(workflow_with(steps)) == message


def test_a_workflow_with_no_steps_is_still_refused_for_it() -> None:
    assert refusal(workflow_with([])) == (
        "spec is invalid: spec.steps: Tuple should have at least 1 item after validation, not 0"
    )


def test_a_workflow_with_one_step_refused_among_good_ones_names_that_step() -> None:
    steps = [{"id": "a", "tool": "llm.generate"}, {"id": "B", "tool": "llm.generate"}]
    message = refusal(workflow_with(steps))
    assert message == f"spec is invalid: {STEP_ID.replace('[0]', '[1]')}"


def run_document(**spec: Any) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((EXAMPLES / "workflowrun.yaml").read_text())
    document["spec"].update(copy.deepcopy(spec))
    return document


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"smokeTest": {"golden": [{"name": "ok", "input": {}, "expect": {"contains": [""]}}]}},
            "spec.smokeTest.golden[0].expect.contains[0]: String should have at least 1 character",
        ),
        (
            {"canary": {"steps": [10, "half"]}},
            "spec.canary.steps[1]: Input should be a valid integer, unable to parse string as"
            " an integer",
        ),
    ],
    ids=["golden-rule", "canary-step"],
)
def test_a_workflowrun_with_a_refused_list_item_gets_one_message(
    spec: dict[str, Any], message: str
) -> None:
    document = run_document(**spec)
    with pytest.raises(SpecInvalid) as error:
        parse_resource(document)
    name = document["metadata"]["name"]
    assert str(error.value) == f"WorkflowRun {name!r}: {message}"


class Item(BaseModel):
    size: int = Field(ge=1)


class Listing(BaseModel):
    items: tuple[Item, ...] = Field(min_length=1)
    tags: list[str] = Field(min_length=2)


def described(document: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as error:
        Listing.model_validate(document)
    return describe_validation_error(error.value)


def test_a_container_emptied_by_its_refused_items_is_not_reported_as_well() -> None:
    message = described({"items": [{"size": 0}], "tags": ["a", "b"]})
    assert message == "items[0].size: Input should be greater than or equal to 1"
    assert FOLLOW_ON not in message


def test_a_container_given_too_short_is_reported_beside_an_unrelated_problem() -> None:
    message = described({"items": [], "tags": [1, "b"]})
    assert message == (
        "items: Tuple should have at least 1 item after validation, not 0; "
        "tags[0]: Input should be a valid string"
    )
