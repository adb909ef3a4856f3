"""The pure parts of shadow traffic: which calls are mirrored, the budget, reading answers."""

import json

import pytest

from plnt_common.shadow_pairs import EffectCall, ShadowRoute
from plnt_router.logic import CanarySplit, ShadowBudget, choose_mirrors
from plnt_router.shadow_answer import streamed_answer, whole_answer

EFFECT = EffectCall(tool="mail.send", input_sha256="cd" * 32)
EFFECTS_HEADER = json.dumps([EFFECT.model_dump()], separators=(",", ":"))


@pytest.mark.parametrize(
    ("percent", "noise_percent"),
    [(0, 0), (5, 1), (20, 5), (50, 50), (100, 25), (33, 0)],
    ids=["off", "5-1", "20-5", "50-50", "all-25", "33-none"],
)
def test_exactly_the_shares_of_calls_are_mirrored_each_way(
    percent: int, noise_percent: int
) -> None:
    shadow = ShadowRoute(saga_id="s", percent=percent, noise_percent=noise_percent)
    canary_split, noise_split = CanarySplit(), CanarySplit()
    choices = [
        choose_mirrors(shadow=shadow, canary_split=canary_split, noise_split=noise_split)
        for _ in range(1000)
    ]
    assert sum(canary for canary, _ in choices) == percent * 10
    assert sum(noise for _, noise in choices) == noise_percent * 10


def test_the_budget_is_reached_once_and_then_allows_nothing() -> None:
    budget = ShadowBudget()
    assert budget.allows("s", 1.0) and budget.allows("s", None)
    assert [budget.spend("s", 0.4, 1.0) for _ in range(4)] == [False, False, True, False]
    assert not budget.allows("s", 1.0)
    assert budget.allows("other", 1.0)  # per saga
    assert budget.allows("s", None)  # no budget: never stops


def test_the_budget_forgets_the_oldest_sagas_beyond_its_size() -> None:
    budget = ShadowBudget(max_sagas=2)
    for saga in ("a", "b", "c"):
        budget.spend(saga, 5.0, 1.0)
    assert budget.spent("a") == 0.0 and budget.spent("c") == 5.0


def test_a_json_answer_reads_its_cost_and_effects_headers() -> None:
    answer = whole_answer(
        revision="r",
        status=200,
        raw=b'{"reply": "hi"}',
        latency_ms=12.34567,
        cost="0.25",
        effects=EFFECTS_HEADER,
    )
    assert (answer.body, answer.cost_usd, answer.effects) == ({"reply": "hi"}, 0.25, (EFFECT,))
    assert answer.latency_ms == 12.346


@pytest.mark.parametrize(
    ("raw", "cost", "effects"),
    [
        (b"not json", "abc", "not json"),
        (b"", "-1", '[{"tool": 3}]'),
        (None, "nan", "{}"),
        (b"[]", None, None),
    ],
    ids=["garbage", "negative-cost-bad-effect", "too-large-nan", "missing-headers"],
)
def test_a_malformed_answer_or_header_reads_as_nothing_never_an_error(
    raw: bytes | None, cost: str | None, effects: str | None
) -> None:
    answer = whole_answer(
        revision="r", status=200, raw=raw, latency_ms=1, cost=cost, effects=effects
    )
    assert answer.cost_usd == 0.0 and answer.effects == ()
    assert answer.body in (None, [])


def sse(*events: tuple[str, object]) -> bytes:
    return b"".join(f"event: {e}\ndata: {json.dumps(d)}\n\n".encode() for e, d in events)


def test_a_streamed_answer_is_its_result_event_with_its_effects_and_cost() -> None:
    result = {"reply": "hi", "usage": {"cost_usd": 0.5}, "effects": [EFFECT.model_dump()]}
    answer = streamed_answer(
        revision="r",
        status=200,
        raw=sse(("token", {"delta": "h"}), ("result", result)),
        latency_ms=1,
        cost=None,
        effects=None,
    )
    assert (answer.status, answer.body, answer.cost_usd) == (200, result, 0.5)
    assert answer.effects == (EFFECT,)


def test_a_stream_ending_in_an_error_or_without_a_result_is_a_failed_answer() -> None:
    failed = streamed_answer(
        revision="r",
        status=200,
        raw=sse(("error", {"status": 503, "error": "no model"})),
        latency_ms=1,
        cost=None,
        effects=None,
    )
    assert (failed.status, failed.body["error"], failed.effects) == (503, "no model", ())
    cut = streamed_answer(
        revision="r",
        status=200,
        raw=sse(("token", {"delta": "h"})),
        latency_ms=1,
        cost=None,
        effects=None,
    )
    assert (cut.status, cut.body) == (502, None)
