"""Golden cases judged rule by rule on a reply text (pure: no canary, no model)."""

from typing import Any

import pytest

from plnt_common.golden import GoldenCase, GoldenResult
from plnt_common.resources import SmokeTest
from plnt_smoke.golden import (
    MAX_REPLY_CHARS,
    GoldenAnswer,
    Similarity,
    describe_failures,
    judge_case,
    reply_text,
)
from plnt_smoke.logic import Sample, judge

REPLY = (
    "[offline] Thank you so much for your kind words about our service! "
    "We're sorry to hear about the slow parking."
)
NOT_SCORED = Similarity(score=None)


def case(expect: dict[str, Any], name: str = "polite-reply") -> GoldenCase:
    return GoldenCase.model_validate({"name": name, "input": {"review": "r"}, "expect": expect})


# (expect, similarity, passed, reason)
RULES: list[tuple[str, dict[str, Any], Similarity, bool, str]] = [
    ("contains-present", {"contains": ["parking"]}, NOT_SCORED, True, "all rules held"),
    (
        "contains-missing",
        {"contains": ["parking", "refund"]},
        NOT_SCORED,
        False,
        'contains "refund" missing',
    ),
    ("contains-is-case-sensitive", {"contains": ["Parking"]}, NOT_SCORED, False, "missing"),
    ("not-contains-absent", {"notContains": ["refund"]}, NOT_SCORED, True, "all rules held"),
    (
        "not-contains-present",
        {"notContains": ["slow parking"]},
        NOT_SCORED,
        False,
        'notContains "slow parking" present',
    ),
    ("matches-found-anywhere", {"matches": "(?i)THANK"}, NOT_SCORED, True, "all rules held"),
    ("matches-not-found", {"matches": "^Thank"}, NOT_SCORED, False, 'matches "^Thank" not found'),
    (
        "similar-above-threshold",
        {"similarTo": "thanks", "minSimilarity": 0.6},
        Similarity(0.81),
        True,
        "all rules held (similarity 0.81)",
    ),
    (
        "similar-at-threshold",
        {"similarTo": "thanks", "minSimilarity": 0.6},
        Similarity(0.6),
        True,
        "all rules held (similarity 0.60)",
    ),
    (
        "similar-below-threshold",
        {"similarTo": "thanks", "minSimilarity": 0.7},
        Similarity(0.42),
        False,
        "similarity 0.42 < 0.70",
    ),
    (
        "similar-default-threshold-0.7",
        {"similarTo": "thanks"},
        Similarity(0.69),
        False,
        "similarity 0.69 < 0.70",
    ),
    (
        "similar-just-below-shows-more-digits",
        {"similarTo": "thanks"},
        Similarity(0.6999),
        False,
        "similarity 0.6999 < 0.70",
    ),
    (
        "similar-not-scored",
        {"similarTo": "thanks"},
        Similarity(None, "no model here"),
        False,
        "similarity not scored: no model here",
    ),
    (
        "every-failing-rule-named",
        {"contains": ["refund"], "notContains": ["parking"], "matches": "xyz"},
        NOT_SCORED,
        False,
        'contains "refund" missing; notContains "parking" present; matches "xyz" not found',
    ),
]


@pytest.mark.parametrize(
    ("expect", "similarity", "passed", "reason"),
    [row[1:] for row in RULES],
    ids=[row[0] for row in RULES],
)
def test_each_rule_is_judged_on_the_reply_text(
    expect: dict[str, Any], similarity: Similarity, passed: bool, reason: str
) -> None:
    result = judge_case(case(expect), GoldenAnswer(text=REPLY), similarity)
    assert result.passed is passed
    assert reason in result.reason
    assert result.name == "polite-reply"


def test_a_case_without_a_reply_fails_with_the_call_error() -> None:
    answer = GoldenAnswer(text=None, error="HTTP 500: boom")
    result = judge_case(case({"contains": ["x"]}), answer, NOT_SCORED)
    assert not result.passed
    assert result.reason == "no reply: HTTP 500: boom"


def test_rules_see_a_bounded_reply() -> None:
    long_reply = "a" * MAX_REPLY_CHARS + "needle"
    result = judge_case(case({"contains": ["needle"]}), GoldenAnswer(text=long_reply), NOT_SCORED)
    assert not result.passed


# (body, text)
BODIES: list[tuple[str, Any, str | None]] = [
    ("reply", {"reply": "Hi", "output": {"safety_check": {}, "reply": "Hi"}}, "Hi"),
    ("declared-reply-wins", {"reply": "Declared", "output": {"reply": "Other"}}, "Declared"),
    ("null-reply-falls-back", {"reply": None, "output": {"draft": {"text": "T"}}}, "T"),
    ("output-reply", {"output": {"safety_check": {"allowed": True}, "reply": "Hi"}}, "Hi"),
    ("one-sink-text", {"output": {"draft": {"text": "Hello", "provider": "x"}}}, "Hello"),
    ("one-sink-string", {"output": {"answer": "Plain"}}, "Plain"),
    ("string-output", {"output": "Plain"}, "Plain"),
    ("several-sinks-as-json", {"output": {"b": 1, "a": {"x": 2}}}, '{"a": {"x": 2}, "b": 1}'),
    ("no-output", {"error": "x"}, None),
    ("not-a-mapping", ["output"], None),
]


@pytest.mark.parametrize(
    ("body", "text"), [row[1:] for row in BODIES], ids=[row[0] for row in BODIES]
)
def test_the_reply_text_of_a_runner_answer(body: Any, text: str | None) -> None:
    assert reply_text(body) == text


def failed(name: str, reason: str) -> GoldenResult:
    return GoldenResult(name=name, passed=False, reason=reason)


def test_failures_name_every_failed_case_and_none_that_passed() -> None:
    ok = GoldenResult(name="ok-case", passed=True, reason="all rules held")
    assert describe_failures([ok]) == ""
    assert describe_failures([ok, failed("a", "x missing")]) == "golden case a failed: x missing"
    both = describe_failures([failed("a", "x missing"), ok, failed("b", "similarity 0.1 < 0.70")])
    assert both == "2 golden cases failed: a (x missing), b (similarity 0.1 < 0.70)"


FAST = [Sample(5.0, ok=True)] * 3


def test_a_failed_golden_case_fails_the_verdict_within_budgets() -> None:
    figures = judge(FAST, SmokeTest(), (failed("polite-reply", 'contains "x" missing'),))
    assert not figures.passed
    assert figures.reason == 'golden case polite-reply failed: contains "x" missing'
    assert figures.golden[0].name == "polite-reply"


def test_passing_golden_cases_pass_and_are_counted() -> None:
    results = (GoldenResult(name="a", passed=True), GoldenResult(name="b", passed=True))
    figures = judge(FAST, SmokeTest(), results)
    assert figures.passed
    assert figures.reason.endswith("golden cases 2/2 passed")
    assert figures.golden == results


def test_a_run_without_golden_cases_is_judged_as_before() -> None:
    figures = judge(FAST, SmokeTest())
    assert figures.passed
    assert figures.golden == ()
    assert figures.reason == "p95 5 ms <= 2500 ms, errors 0.0% <= 1%"
