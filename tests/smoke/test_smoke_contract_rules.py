"""The runner contract's judgements (plnt_smoke.contract), pure: answers in, one line out."""

import json
from typing import Any

import pytest

from plnt_smoke.contract import (
    Answer,
    Clause,
    describe_misses,
    judge_drain,
    judge_errors,
    judge_invoke,
    judge_metrics,
    judge_stream,
    judge_trace,
    missed,
    parse_sse,
)

GOOD = {
    "output": {"x": 1},
    "reply": None,
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}
HEADERS = {"x-plnt-revision": "r1", "x-plnt-tokens": "3,2"}


def answer(status: int, body: Any, **headers: str) -> Answer:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Answer(status=status, headers={**HEADERS, **headers}, body=raw)


def without(body: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != key}


@pytest.mark.parametrize(
    ("reply", "line"),
    [
        (
            answer(200, GOOD),
            "✓ 3 invoke: 200 with output, reply and usage; x-plnt-revision r1, x-plnt-tokens 3,2",
        ),
        (answer(200, without(GOOD, "output")), "✗ 3 invoke: response lacks output"),
        (answer(200, without(GOOD, "reply")), "✗ 3 invoke: response lacks reply"),
        (answer(200, {**GOOD, "reply": 7}), "✗ 3 invoke: reply is a number, not text or null"),
        (
            answer(200, {**GOOD, "usage": {"prompt_tokens": 3, "completion_tokens": 2}}),
            "✗ 3 invoke: response lacks usage.total_tokens",
        ),
        (
            Answer(status=200, headers={"x-plnt-revision": "r1"}, body=json.dumps(GOOD).encode()),
            "✗ 3 invoke: response lacks the x-plnt-tokens header",
        ),
        (
            answer(200, GOOD, **{"x-plnt-tokens": "5,0"}),
            "✗ 3 invoke: x-plnt-tokens is '5,0', not '3,2' as usage says",
        ),
        (
            answer(200, GOOD, **{"x-plnt-revision": "r2"}),
            "✗ 3 invoke: x-plnt-revision is 'r2', not PLNT_RUNNER_REVISION 'r1'",
        ),
        (answer(200, b"<html>"), "✗ 3 invoke: body is not JSON"),
        (answer(404, b"not found"), "✗ 3 invoke: answered HTTP 404: not found"),
        (
            answer(500, {"error": "step 'a' failed", "step": "a"}),
            "? 3 invoke: not judged: the invocation failed (HTTP 500: step 'a' failed)",
        ),
    ],
    ids=[
        "holds",
        "no-output",
        "no-reply",
        "reply-not-text",
        "no-total-tokens",
        "no-tokens-header",
        "tokens-disagree",
        "other-revision",
        "not-json",
        "404",
        "failed-workflow",
    ],
)
def test_clause_3_judges_the_invoke_answer(reply: Answer, line: str) -> None:
    assert judge_invoke(reply, revision="r1").line() == line


def sse(*events: tuple[str, Any]) -> Answer:
    text = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)
    return answer(200, text.encode(), **{"content-type": "text/event-stream"})


@pytest.mark.parametrize(
    ("stream", "line"),
    [
        (
            sse(("step", {}), ("token", {}), ("token", {}), ("result", GOOD)),
            "✓ 5 stream: 1 step, 2 token events, then one result event",
        ),
        (
            sse(("step", {}), ("error", {"error": "x"})),
            "✓ 5 stream: 1 step, 0 token events, then one error event",
        ),
        (sse(("step", {})), "✗ 5 stream: stream has no result or error event (events: step)"),
        (
            sse(("result", GOOD), ("result", GOOD)),
            "✗ 5 stream: stream has 2 result/error events, not one",
        ),
        (sse(("result", GOOD), ("step", {})), "✗ 5 stream: events follow the result event"),
        (sse(("tick", {}), ("result", GOOD)), "✗ 5 stream: unexpected event 'tick'"),
        (sse(("result", without(GOOD, "usage"))), "✗ 5 stream: result event: response lacks usage"),
        (sse(("error", {"message": "x"})), "✗ 5 stream: error event without an error field"),
        (answer(200, GOOD), "✗ 5 stream: content-type is missing, not text/event-stream"),
    ],
    ids=[
        "result",
        "error",
        "no-end",
        "two-ends",
        "after-end",
        "unknown",
        "bad-result",
        "bad-error",
        "not-sse",
    ],
)
def test_clause_5_judges_the_event_stream(stream: Answer, line: str) -> None:
    assert judge_stream(stream).line() == line


def test_sse_parsing_joins_data_lines_skips_comments_and_reads_crlf() -> None:
    text = ": hello\r\nevent: a\r\ndata: 1\r\ndata: 2\r\n\r\ndata: 3\n\n"
    assert parse_sse(text) == [("a", "1\n2"), ("message", "3")]


def test_clause_4_wants_a_4xx_with_error_for_each_body() -> None:
    good = answer(422, {"error": "no"})
    assert judge_errors([("a JSON array", good), ("malformed JSON", good)]).held
    assert judge_errors([("a JSON array", answer(200, GOOD))]).line() == (
        "✗ 4 errors: a JSON array answered HTTP 200, not a 4xx"
    )
    assert judge_errors([("a JSON array", answer(400, {"message": "no"}))]).line() == (
        "✗ 4 errors: a JSON array answered 400 without an error field"
    )


@pytest.mark.parametrize(
    ("text", "held"),
    [
        (
            'plnt_invocations_total{a="b"} 1\nplnt_invocation_duration_seconds_bucket{le="1"} 1\n',
            True,
        ),
        (
            "# TYPE plnt_invocations_total counter\n# HELP plnt_invocation_duration_seconds x\n",
            True,
        ),
        ("plnt_invocations_total 1\n", False),
        ("plnt_invocations_totally 1\nplnt_invocation_duration_seconds_sum 1\n", False),
    ],
    ids=["samples", "type-and-help", "no-histogram", "prefix-only"],
)
def test_clause_6_finds_both_metrics_by_name(text: str, held: bool) -> None:
    assert judge_metrics(Answer(status=200, body=text.encode())).held is held


def test_clause_7_wants_the_call_answered_and_an_exit_within_the_limit() -> None:
    answered, cut = Answer(status=500), Answer(status=0, problem="ConnectionResetError")
    judge = judge_drain
    assert judge(call=answered, exit_code=0, exited_after_s=0.4, signal_number=15).held
    assert not judge(call=cut, exit_code=0, exited_after_s=0.4, signal_number=15).held
    assert not judge(call=answered, exit_code=None, exited_after_s=10, signal_number=15).held
    assert not judge(call=answered, exit_code=-15, exited_after_s=0.1, signal_number=15).held


SENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    ("headers", "line"),
    [
        (
            {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01"},
            "✓ 8 trace: continues trace 4bf92f3577b34da6a3ce929d0e0e4736 as span b7ad6b7169203331",
        ),
        ({}, "✗ 8 trace: the answer carries no traceparent header"),
        (
            {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
            "✗ 8 trace: traceparent names trace 0af7651916cd43dd8448eb211c80319c, not the trace "
            "sent 4bf92f3577b34da6a3ce929d0e0e4736",
        ),
        (
            {"traceparent": SENT},
            "✗ 8 trace: traceparent repeats the caller's span id 00f067aa0ba902b7, not a span of "
            "its own",
        ),
        ({"traceparent": "trace-me"}, "✗ 8 trace: traceparent 'trace-me' is not a W3C traceparent"),
    ],
    ids=["continued", "missing", "other-trace", "same-span", "malformed"],
)
def test_clause_8_wants_the_callers_trace_with_a_span_of_the_runners_own(
    headers: dict[str, str], line: str
) -> None:
    assert judge_trace(Answer(status=200, headers=headers), sent=SENT).line() == line


def test_misses_are_named_by_clause_and_an_unjudged_clause_is_none() -> None:
    results = [
        missed(Clause.INVOKE, "response lacks reply"),
        judge_invoke(answer(500, {"error": "x"}), revision=None),
        missed(Clause.METRICS, "metrics lack plnt_invocations_total"),
    ]
    assert describe_misses(results) == (
        "runner contract v1: clause 3 invoke: response lacks reply; "
        "clause 6 metrics: metrics lack plnt_invocations_total"
    )
    assert describe_misses(results[1:2]) == ""
