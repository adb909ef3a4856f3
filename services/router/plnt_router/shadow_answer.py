"""A runner's answer as one side of a shadow pair: status, JSON body, cost, side effects. Pure.

The router hands over what it received (status, body bytes, two headers, how long it took)
and gets a ``ShadowAnswer`` back. A JSON answer's cost is its ``x-plnt-cost-usd`` header;
a streamed (SSE) answer is read whole here, its body being the ``result`` event's data (an
``error`` event gives the status it names) and its cost the result's ``usage.cost_usd``
when the runner puts one there (its headers left before the cost was known). Side effects
come from the ``x-plnt-effects`` header, or a streamed result's ``effects`` field; a
missing or malformed list is no effects. Nothing here does I/O or raises on bad input.
"""

import json
from typing import Any

from pydantic import TypeAdapter, ValidationError

from plnt_common.shadow_pairs import EffectCall, ShadowAnswer
from plnt_router.sse import SseDecoder

COST_HEADER = "x-plnt-cost-usd"
"""What the runner's answer says the call cost, in USD."""
_EFFECTS = TypeAdapter(tuple[EffectCall, ...])
STREAM_WITHOUT_RESULT = 502
"""The status of a streamed answer that ended without a result (as the chat stream says)."""


def effects_of(value: Any) -> tuple[EffectCall, ...]:
    """The effect calls a header's text or a decoded list holds; () when absent or malformed."""
    if value is None:
        return ()
    try:
        if isinstance(value, (str, bytes)):
            return _EFFECTS.validate_json(value)
        return _EFFECTS.validate_python(value)
    except ValidationError:
        return ()


def cost_of(value: Any) -> float:
    """A cost in USD from a header or a JSON number; 0 when absent, malformed or negative."""
    try:
        cost = float(value) if value is not None and not isinstance(value, bool) else 0.0
    except (TypeError, ValueError):
        return 0.0
    return cost if cost >= 0 and cost == cost and cost != float("inf") else 0.0


def json_body(raw: bytes | None) -> Any:
    """The JSON value of ``raw``; None when there is none or it is not JSON."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def whole_answer(
    *,
    revision: str,
    status: int,
    raw: bytes | None,
    latency_ms: float,
    cost: str | None,
    effects: str | None,
) -> ShadowAnswer:
    """A JSON (or any whole) answer; ``raw`` None when it was too large to keep."""
    return ShadowAnswer(
        revision=revision,
        status=status,
        body=json_body(raw),
        latency_ms=round(latency_ms, 3),
        cost_usd=cost_of(cost),
        effects=effects_of(effects),
    )


def streamed_answer(
    *,
    revision: str,
    status: int,
    raw: bytes | None,
    latency_ms: float,
    cost: str | None,
    effects: str | None,
) -> ShadowAnswer:
    """An SSE answer collected whole: its ``result`` (or ``error``) event is the answer."""
    body: Any = None
    final_status = status
    if raw is not None and 200 <= status < 300:
        final_status = STREAM_WITHOUT_RESULT
        for event, data in SseDecoder().feed(raw + b"\n\n"):
            if event == "result":
                body, final_status = json_body(data.encode()), status
            elif event == "error":
                body = json_body(data.encode())
                named = body.get("status") if isinstance(body, dict) else None
                final_status = named if isinstance(named, int) and named >= 400 else 500
    result = body if isinstance(body, dict) and final_status == status else {}
    usage = result.get("usage")
    in_result = usage.get("cost_usd") if isinstance(usage, dict) else None
    return ShadowAnswer(
        revision=revision,
        status=final_status,
        body=body,
        latency_ms=round(latency_ms, 3),
        cost_usd=cost_of(in_result if in_result is not None else cost),
        effects=effects_of(result.get("effects", effects)),
    )


def unreached(*, revision: str, latency_ms: float) -> ShadowAnswer:
    """The side of a pair whose runner could not be reached or timed out: status 0."""
    return ShadowAnswer(revision=revision, status=0, latency_ms=round(latency_ms, 3))
