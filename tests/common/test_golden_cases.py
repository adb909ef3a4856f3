"""spec.smokeTest.golden validated: every bad input refused with one message naming the field."""

import copy
from typing import Any

import pytest

from plnt_common.errors import SpecInvalid
from plnt_common.golden import DEFAULT_MIN_SIMILARITY
from plnt_common.resources import WorkflowRun, parse_resource

GOOD_CASE: dict[str, Any] = {
    "name": "polite-reply",
    "input": {"review": "Great service but slow parking", "brand_voice": "warm"},
    "expect": {
        "contains": ["parking"],
        "notContains": ["refund"],
        "matches": "(?i)thank",
        "similarTo": "Thank you for the kind words; sorry the parking was slow.",
        "minSimilarity": 0.6,
    },
}


def run_with(golden: Any) -> dict[str, Any]:
    return {
        "apiVersion": "plnt.work/v1",
        "kind": "WorkflowRun",
        "metadata": {"name": "review-responder"},
        "spec": {
            "workflow": {"ref": "review-responder@1.2.0", "registry": "s3://microagents"},
            "backend": {"cluster": "gpu-cluster-01"},
            "smokeTest": {"invocations": 3, "golden": golden},
        },
    }


def with_expect(**expect: Any) -> list[dict[str, Any]]:
    return [{"name": "c", "input": {}, "expect": expect}]


def parsed(golden: Any) -> WorkflowRun:
    run = parse_resource(run_with(golden))
    assert isinstance(run, WorkflowRun)
    return run


def test_a_full_golden_case_is_read_with_every_rule() -> None:
    (case,) = parsed([GOOD_CASE]).spec.smoke_test.golden
    assert case.name == "polite-reply"
    assert case.input["review"] == "Great service but slow parking"
    assert case.expect.contains == ("parking",)
    assert case.expect.not_contains == ("refund",)
    assert case.expect.matches == "(?i)thank"
    assert case.expect.similarity_threshold == 0.6


def test_similar_to_without_a_threshold_gets_the_default() -> None:
    (case,) = parsed(with_expect(similarTo="thanks")).spec.smoke_test.golden
    assert case.expect.similarity_threshold == DEFAULT_MIN_SIMILARITY == 0.7


def test_a_run_without_golden_cases_has_none() -> None:
    document = run_with([])
    del document["spec"]["smokeTest"]["golden"]
    run = parse_resource(document)
    assert isinstance(run, WorkflowRun)
    assert run.spec.smoke_test.golden == ()


def many(count: int) -> list[dict[str, Any]]:
    return [{**GOOD_CASE, "name": f"case-{i}"} for i in range(count)]


BAD: list[tuple[str, Any, str]] = [
    (
        "matches-does-not-compile",
        [GOOD_CASE, {**GOOD_CASE, "name": "b", "expect": {"matches": "(unclosed"}}],
        "spec.smokeTest.golden[1].expect.matches: not a valid regular expression: "
        "missing ), unterminated subpattern",
    ),
    ("no-rule", with_expect(), "spec.smokeTest.golden[0].expect: give at least one rule"),
    (
        "threshold-without-reference",
        with_expect(contains=["x"], minSimilarity=0.5),
        "spec.smokeTest.golden[0].expect.minSimilarity: needs similarTo",
    ),
    (
        "threshold-above-1",
        with_expect(similarTo="x", minSimilarity=1.5),
        "spec.smokeTest.golden[0].expect.minSimilarity: Input should be less than or equal to 1",
    ),
    (
        "threshold-negative",
        with_expect(similarTo="x", minSimilarity=-0.1),
        "spec.smokeTest.golden[0].expect.minSimilarity:",
    ),
    (
        "name-not-a-label",
        [{**GOOD_CASE, "name": "Polite_Reply"}],
        "spec.smokeTest.golden[0].name: case name 'Polite_Reply' is not a DNS-1123 label",
    ),
    (
        "name-too-long",
        [{**GOOD_CASE, "name": "a" * 64}],
        "spec.smokeTest.golden[0].name: case name",
    ),
    (
        "names-repeat",
        [GOOD_CASE, {**GOOD_CASE, "name": "other"}, GOOD_CASE],
        "spec.smokeTest.golden: case name 'polite-reply' is used by cases [0] and [2]",
    ),
    ("too-many-cases", many(21), "spec.smokeTest.golden: Tuple should have at most 20 items"),
    (
        "input-too-large",
        [{**GOOD_CASE, "input": {"review": "x" * 17_000}}],
        "spec.smokeTest.golden[0].input: input is 17013 bytes as JSON, over the 16384-byte bound",
    ),
    (
        "input-not-a-mapping",
        [{**GOOD_CASE, "input": "hello"}],
        "spec.smokeTest.golden[0].input:",
    ),
    ("input-missing", [{"name": "c", "expect": {"contains": ["x"]}}], "golden[0].input: Field"),
    ("expect-missing", [{"name": "c", "input": {}}], "spec.smokeTest.golden[0].expect: Field"),
    (
        "empty-contains-text",
        with_expect(contains=["ok", ""]),
        "spec.smokeTest.golden[0].expect.contains[1]: String should have at least 1 character",
    ),
    (
        "contains-not-a-list",
        with_expect(contains="parking"),
        "spec.smokeTest.golden[0].expect.contains:",
    ),
    (
        "too-many-texts",
        with_expect(notContains=[f"t{i}" for i in range(21)]),
        "spec.smokeTest.golden[0].expect.notContains:",
    ),
    (
        "reference-too-long",
        with_expect(similarTo="x" * 2001),
        "spec.smokeTest.golden[0].expect.similarTo:",
    ),
    ("empty-regex", with_expect(matches=""), "spec.smokeTest.golden[0].expect.matches:"),
    (
        "unknown-rule",
        with_expect(contain=["x"]),
        "spec.smokeTest.golden[0].expect.contain: Extra inputs are not permitted",
    ),
    ("golden-not-a-list", {"name": "c"}, "spec.smokeTest.golden:"),
]


@pytest.mark.parametrize(
    ("golden", "message"), [row[1:] for row in BAD], ids=[row[0] for row in BAD]
)
def test_bad_golden_input_is_refused_naming_the_field(golden: Any, message: str) -> None:
    with pytest.raises(SpecInvalid) as raised:
        parse_resource(run_with(copy.deepcopy(golden)))
    text = str(raised.value)
    assert text.startswith("WorkflowRun 'review-responder': ")
    assert message in text
    assert "\n" not in text
