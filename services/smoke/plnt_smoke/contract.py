"""The runner contract, version 1 (docs/runner-contract.md): its clauses, and the judgement
of what a runner answered to each.

Pure: the answers come from ``plnt_smoke.adapters.contract``, which sends the requests.
``plnt runner check`` and the smoke step both judge a runner through this module, so they
read the contract the same way.
"""

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

CONTRACT_VERSION = 1
REVISION_HEADER = "x-plnt-revision"
TOKENS_HEADER = "x-plnt-tokens"
STREAM_EVENTS = ("step", "token")
"""SSE events a runner streams before its one ``result`` or ``error`` event."""
USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")
DRAIN_LIMIT_S = 10.0
"""How long after SIGTERM a runner may take to finish its calls and exit."""


class Clause(IntEnum):
    """One clause of the runner contract, numbered as in the document."""

    SETTINGS = 1
    """It reads the ``PLNT_RUNNER_*`` settings."""
    HEALTHZ = 2
    """``GET /healthz`` answers 200 once it can serve."""
    INVOKE = 3
    """``POST /invoke`` answers ``output``, ``reply``, ``usage`` and the two headers."""
    ERRORS = 4
    """A body that is not a JSON object gets a 4xx with ``error``."""
    STREAM = 5
    """SSE: ``step``/``token`` events, then exactly one ``result`` or ``error``."""
    METRICS = 6
    """``GET /metrics`` is Prometheus text with the two invocation metrics."""
    SIGTERM = 7
    """On SIGTERM: stop taking calls, finish those in flight, exit within 10 s."""
    TRACE = 8
    """The answer to an invocation continues the ``traceparent`` it was sent."""

    @property
    def label(self) -> str:
        """``3 invoke``: how lines and messages name the clause."""
        return f"{self.value} {self.name.lower()}"


SERVED_CLAUSES = (
    Clause.HEALTHZ,
    Clause.INVOKE,
    Clause.ERRORS,
    Clause.STREAM,
    Clause.METRICS,
    Clause.TRACE,
)
"""The clauses a running runner can be checked on from outside (2-6 and 8)."""
TRACEPARENT_HEADER = "traceparent"
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


@dataclass(frozen=True)
class Answer:
    """What a runner answered to one request; ``status`` 0 and ``problem`` when none came."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    """Lower-case header names."""
    body: bytes = b""
    problem: str = ""

    def describe(self) -> str:
        return self.problem or f"HTTP {self.status}"


@dataclass(frozen=True)
class ClauseResult:
    clause: Clause
    held: bool
    detail: str
    judged: bool = True
    """False when the runner's answer allowed no judgement: the workflow itself failed on
    the check's invocation, as clause 4 lets it. Not held, and not a miss either."""

    @property
    def missed(self) -> bool:
        return self.judged and not self.held

    def line(self) -> str:
        """``✓ 2 healthz: 200 after 0.4 s``, ``✗ 3 invoke: response lacks usage``, or
        ``? 3 invoke: not judged: ...``."""
        mark = "✓" if self.held else "✗" if self.judged else "?"
        return f"{mark} {self.clause.label}: {self.detail}"


def held(clause: Clause, detail: str) -> ClauseResult:
    return ClauseResult(clause=clause, held=True, detail=detail)


def missed(clause: Clause, detail: str) -> ClauseResult:
    return ClauseResult(clause=clause, held=False, detail=detail)


def not_checked(clauses: Sequence[Clause], why: str) -> list[ClauseResult]:
    """Clauses that could not be checked count as missed, saying why."""
    return [missed(clause, f"not checked: {why}") for clause in clauses]


def describe_misses(results: Sequence[ClauseResult]) -> str:
    """The missed clauses for a verdict (``runner contract v1: clause 3 invoke: ...``);
    "" when no clause was missed (one not judged is no miss)."""
    failed = [r for r in results if r.missed]
    if not failed:
        return ""
    clauses = "; ".join(f"clause {r.clause.label}: {r.detail}" for r in failed)
    return f"runner contract v{CONTRACT_VERSION}: {clauses}"


def judge_healthz(answer: Answer, *, waited_s: float) -> ClauseResult:
    """Clause 2 from the first 200, or from the last answer when none was 200."""
    if answer.status == 200:
        return held(Clause.HEALTHZ, f"200 after {waited_s:.1f} s")
    return missed(Clause.HEALTHZ, f"no 200 within {waited_s:.1f} s (last: {answer.describe()})")


def result_body_problem(body: Any) -> str:
    """What an invoke result body (clause 3, and clause 5's ``result``) lacks; "" if nothing."""
    if not isinstance(body, dict):
        return f"body is {_json_kind(body)}, not a JSON object"
    if "output" not in body:
        return "response lacks output"
    if "reply" not in body:
        return "response lacks reply"
    if body["reply"] is not None and not isinstance(body["reply"], str):
        return f"reply is {_json_kind(body['reply'])}, not text or null"
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return "response lacks usage"
    for name in USAGE_FIELDS:
        if name not in usage:
            return f"response lacks usage.{name}"
        value = usage[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"usage.{name} is {json.dumps(value)}, not a whole number"
    return ""


def judge_invoke(answer: Answer, *, revision: str | None) -> ClauseResult:
    """Clause 3; ``revision`` is the ``PLNT_RUNNER_REVISION`` the runner was given, when known.

    An error answer as clause 4 describes (4xx or 5xx with ``error``: the body did not
    match ``spec.input``, a step failed) is not judged: a canary whose workflow fails is
    for the smoke test's error budget to judge, not the contract."""
    failure = _error_answer(answer)
    if failure:
        return not_judged(Clause.INVOKE, failure)
    if answer.status != 200:
        return missed(Clause.INVOKE, f"answered {answer.describe()}{_excerpt(answer)}")
    body, problem = _json(answer.body)
    problem = problem or result_body_problem(body)
    if problem:
        return missed(Clause.INVOKE, problem)
    got_revision = answer.headers.get(REVISION_HEADER)
    if got_revision is None:
        return missed(Clause.INVOKE, f"response lacks the {REVISION_HEADER} header")
    if revision is not None and got_revision != revision:
        return missed(
            Clause.INVOKE,
            f"{REVISION_HEADER} is {got_revision!r}, not PLNT_RUNNER_REVISION {revision!r}",
        )
    tokens = answer.headers.get(TOKENS_HEADER)
    if tokens is None:
        return missed(Clause.INVOKE, f"response lacks the {TOKENS_HEADER} header")
    usage = body["usage"]
    wanted = f"{usage['prompt_tokens']},{usage['completion_tokens']}"
    if tokens.replace(" ", "") != wanted:
        return missed(Clause.INVOKE, f"{TOKENS_HEADER} is {tokens!r}, not {wanted!r} as usage says")
    return held(
        Clause.INVOKE,
        f"200 with output, reply and usage; {REVISION_HEADER} {got_revision}, "
        f"{TOKENS_HEADER} {tokens}",
    )


def judge_errors(answers: Sequence[tuple[str, Answer]]) -> ClauseResult:
    """Clause 4 from the answers to bodies that are not JSON objects (what was sent, answer)."""
    statuses = []
    for sent, answer in answers:
        if not 400 <= answer.status < 500:
            return missed(Clause.ERRORS, f"{sent} answered {answer.describe()}, not a 4xx")
        body, problem = _json(answer.body)
        if problem:
            return missed(Clause.ERRORS, f"{sent} answered {answer.status}: {problem}")
        if not isinstance(body, dict) or "error" not in body:
            return missed(Clause.ERRORS, f"{sent} answered {answer.status} without an error field")
        statuses.append(f"{sent} {answer.status}")
    return held(Clause.ERRORS, f"{', '.join(statuses)}, each with error")


def parse_sse(text: str) -> list[tuple[str, str]]:
    """The (event, data) pairs of a server-sent event stream; ``message`` when unnamed."""
    events: list[tuple[str, str]] = []
    name, data = "", list[str]()
    for line in [*text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), ""]:
        if not line:
            if data or name:
                events.append((name or "message", "\n".join(data)))
            name, data = "", []
            continue
        if line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if key == "event":
            name = value
        elif key == "data":
            data.append(value)
    return events


def judge_stream(answer: Answer) -> ClauseResult:
    """Clause 5: the SSE answer to an invocation; an error answer before any event (4xx or
    5xx with ``error``) is not judged, as in clause 3."""
    failure = _error_answer(answer)
    if failure:
        return not_judged(Clause.STREAM, failure)
    if answer.status != 200:
        return missed(Clause.STREAM, f"answered {answer.describe()}{_excerpt(answer)}")
    kind = answer.headers.get("content-type", "")
    if not kind.startswith("text/event-stream"):
        return missed(Clause.STREAM, f"content-type is {kind or 'missing'}, not text/event-stream")
    events = parse_sse(answer.body.decode("utf-8", errors="replace"))
    ends = [index for index, (name, _) in enumerate(events) if name in ("result", "error")]
    if not ends:
        seen = ", ".join(dict.fromkeys(name for name, _ in events)) or "none"
        return missed(Clause.STREAM, f"stream has no result or error event (events: {seen})")
    if len(ends) > 1:
        return missed(Clause.STREAM, f"stream has {len(ends)} result/error events, not one")
    if ends[0] != len(events) - 1:
        return missed(Clause.STREAM, f"events follow the {events[ends[0]][0]} event")
    unknown = [name for name, _ in events if name not in (*STREAM_EVENTS, "result", "error")]
    if unknown:
        return missed(Clause.STREAM, f"unexpected event {unknown[0]!r}")
    name, data = events[-1]
    body, problem = _json(data.encode())
    if problem:
        return missed(Clause.STREAM, f"{name} event: {problem}")
    if name == "result":
        problem = result_body_problem(body)
        if problem:
            return missed(Clause.STREAM, f"result event: {problem}")
    elif not isinstance(body, dict) or "error" not in body:
        return missed(Clause.STREAM, "error event without an error field")
    counts = {kind: sum(1 for n, _ in events if n == kind) for kind in STREAM_EVENTS}
    streamed = ", ".join(f"{count} {kind}" for kind, count in counts.items())
    return held(Clause.STREAM, f"{streamed} events, then one {name} event")


_METRICS = ("plnt_invocations_total", "plnt_invocation_duration_seconds")


def judge_metrics(answer: Answer) -> ClauseResult:
    """Clause 6: the ``/metrics`` answer holds both invocation metrics."""
    if answer.status != 200:
        return missed(Clause.METRICS, f"answered {answer.describe()}")
    text = answer.body.decode("utf-8", errors="replace")
    for metric in _METRICS:
        pattern = rf"^(# (HELP|TYPE) )?{metric}(_bucket|_sum|_count)?[\s{{]"
        if re.search(pattern, text, flags=re.MULTILINE) is None:
            return missed(Clause.METRICS, f"metrics lack {metric}")
    return held(Clause.METRICS, f"200 with {' and '.join(_METRICS)}")


def judge_trace(answer: Answer, *, sent: str) -> ClauseResult:
    """Clause 8: the invocation sent with ``traceparent`` ``sent`` was answered with a
    ``traceparent`` of the same trace id and another span id (the runner's own)."""
    if answer.status == 0:
        return missed(Clause.TRACE, f"no answer to the invocation ({answer.describe()})")
    got = answer.headers.get(TRACEPARENT_HEADER)
    if got is None:
        return missed(Clause.TRACE, f"the answer carries no {TRACEPARENT_HEADER} header")
    parsed = _TRACEPARENT.fullmatch(got.strip())
    if parsed is None:
        return missed(Clause.TRACE, f"{TRACEPARENT_HEADER} {got[:80]!r} is not a W3C traceparent")
    _, trace_id, span_id, _ = parsed.groups()
    _, sent_trace, sent_span, _ = sent.split("-")
    if trace_id != sent_trace:
        return missed(
            Clause.TRACE,
            f"{TRACEPARENT_HEADER} names trace {trace_id}, not the trace sent {sent_trace}",
        )
    if span_id == sent_span:
        return missed(
            Clause.TRACE,
            f"{TRACEPARENT_HEADER} repeats the caller's span id {sent_span}, not a span of its own",
        )
    return held(Clause.TRACE, f"continues trace {trace_id} as span {span_id}")


def judge_settings(*, address: str, healthz: ClauseResult) -> ClauseResult:
    """Clause 1, when plnt started the runner with ``PLNT_RUNNER_*``: it serves at
    ``PLNT_RUNNER_HOST``:``PLNT_RUNNER_PORT`` (clause 3 checks that it echoes
    ``PLNT_RUNNER_REVISION``)."""
    if not healthz.held:
        return missed(
            Clause.SETTINGS, f"nothing answered 200 at {address} (PLNT_RUNNER_HOST and _PORT)"
        )
    return held(Clause.SETTINGS, f"serves at {address}, from PLNT_RUNNER_HOST and _PORT")


def judge_drain(
    *, call: Answer, exit_code: int | None, exited_after_s: float, signal_number: int
) -> ClauseResult:
    """Clause 7: the call in flight at SIGTERM was answered, and the process exited in time.

    ``exit_code`` is None when it had not exited ``DRAIN_LIMIT_S`` after the signal."""
    if exit_code is None:
        return missed(Clause.SIGTERM, f"still running {DRAIN_LIMIT_S:g} s after SIGTERM")
    if call.status == 0:
        return missed(
            Clause.SIGTERM, f"the call in flight at SIGTERM got {call.describe()}, not its answer"
        )
    if exit_code == -signal_number:
        return missed(Clause.SIGTERM, "killed by SIGTERM instead of shutting down")
    return held(
        Clause.SIGTERM,
        f"finished the call in flight (HTTP {call.status}) and exited {exit_code} "
        f"{exited_after_s:.1f} s after SIGTERM",
    )


def not_judged(clause: Clause, failure: str) -> ClauseResult:
    return ClauseResult(
        clause=clause,
        held=False,
        judged=False,
        detail=f"not judged: the invocation failed ({failure})",
    )


def _error_answer(answer: Answer) -> str:
    """``HTTP 500: <error>`` when ``answer`` is a 4xx or 5xx holding a JSON ``error``."""
    if answer.status < 400:
        return ""
    body, problem = _json(answer.body)
    if problem or not isinstance(body, dict) or "error" not in body:
        return ""
    return f"HTTP {answer.status}: {str(body['error'])[:160]}"


def _json(raw: bytes) -> tuple[Any, str]:
    try:
        return json.loads(raw), ""
    except (ValueError, RecursionError):
        return None, "body is not JSON"


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _excerpt(answer: Answer) -> str:
    if not answer.body:
        return ""
    text = answer.body[:160].decode("utf-8", errors="replace").replace("\n", " ")
    return f": {text}"
