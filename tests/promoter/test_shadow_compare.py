"""The shadow phase's scoring, figures and verdict, pure, with a scorer stub at the
``SimilarityScorer`` port (one test uses the real sentence-embedding model)."""

from collections.abc import Sequence
from typing import Any

import pytest

from plnt_common.embeddings import SentenceEmbedder
from plnt_common.resources import Shadow
from plnt_common.shadow_pairs import EffectCall, PairKind, ShadowAnswer, ShadowPair
from plnt_promoter import shadow_compare
from plnt_promoter.shadow_compare import Outcome

SAGA = "default.shop.2.1"


class TableScorer:
    """Scores a text pair from a table (both orders), 0 when not listed; counts calls."""

    def __init__(self, table: dict[tuple[str, str], float] | None = None) -> None:
        self.table = table or {}
        self.calls = 0
        self.texts: list[str] = []

    async def similarities(self, *, texts: Sequence[str], references: Sequence[str]) -> list[float]:
        self.calls += 1
        self.texts.extend(texts)
        return [
            self.table.get((a, b), self.table.get((b, a), 0.0))
            for a, b in zip(texts, references, strict=True)
        ]


def answer(
    body: Any,
    *,
    status: int = 200,
    latency_ms: float = 100.0,
    cost: float = 0.01,
    effects: tuple[EffectCall, ...] = (),
) -> ShadowAnswer:
    return ShadowAnswer(
        revision="r",
        status=status,
        body=body,
        latency_ms=latency_ms,
        cost_usd=cost,
        effects=effects,
    )


def pair(
    index: int,
    stable: ShadowAnswer,
    candidate: ShadowAnswer,
    *,
    kind: PairKind = PairKind.CANARY,
    saga: str = SAGA,
) -> ShadowPair:
    return ShadowPair(
        pair_id=f"{kind.value}-{index}",
        namespace="default",
        name="shop",
        saga_id=saga,
        kind=kind,
        input={"text": f"call {index}"},
        stable=stable,
        candidate=candidate,
        at=1000.0 + index,
    )


def reply(text: str, output: Any = None) -> dict[str, Any]:
    return {"output": output, "reply": text, "usage": {}}


async def score(stable: Any, candidate: Any, scorer: TableScorer | None = None) -> float:
    scores = await shadow_compare.score_pairs(
        [pair(0, answer(stable), answer(candidate))], scorer or TableScorer()
    )
    return scores["canary-0"]


# --- scoring ---------------------------------------------------------------------------


async def test_text_replies_score_by_the_scorers_similarity() -> None:
    scorer = TableScorer({("Thanks for the review", "Thank you for your review"): 0.9})
    assert (
        await score(reply("Thanks for the review"), reply("Thank you for your review"), scorer)
        == 0.9
    )
    assert scorer.calls == 1


async def test_equal_texts_score_1_without_the_scorer() -> None:
    scorer = TableScorer()
    assert await score(reply("same"), reply("same"), scorer) == 1.0
    assert scorer.calls == 0


async def test_a_json_output_compares_field_by_field_even_with_a_text_reply() -> None:
    scorer = TableScorer({("the customer is angry", "the customer is upset"): 0.8})
    stable = reply(
        "long text A",
        {"queue": "billing", "priority": 2, "urgent": True, "why": "the customer is angry"},
    )
    canary = reply(
        "unrelated B",
        {"queue": "billing", "priority": 3, "urgent": True, "why": "the customer is upset"},
    )
    # queue 1, priority 0, urgent 1, why 0.8: the reply texts are never compared
    assert await score(stable, canary, scorer) == pytest.approx((1 + 0 + 1 + 0.8) / 4)
    assert "long text A" not in scorer.texts and "unrelated B" not in scorer.texts


@pytest.mark.parametrize(
    ("stable", "canary", "expected"),
    [
        ({"a": 1, "b": [1, 2]}, {"a": 1.0, "b": [1, 2]}, 1.0),
        ({"a": 1, "b": [1, 2]}, {"a": 1, "b": [1]}, 2 / 3),  # b[1] on one side only
        ({"a": True}, {"a": 1}, 0.0),  # a bool is not a number
        ({"a": None}, {"a": None}, 1.0),
        ({}, {}, 1.0),
        ({"a": 1}, "a text", 0.0),  # structured vs text
    ],
    ids=["equal", "missing-leaf", "bool-vs-int", "nulls", "empty", "shape-differs"],
)
async def test_field_scores(stable: Any, canary: Any, expected: float) -> None:
    assert await score(reply("x", stable), reply("x", canary)) == pytest.approx(expected)


async def test_a_dry_run_step_s_output_is_left_out_on_both_sides() -> None:
    """A side-effect step in a shadow call answers its dry run, never what the live call's
    service answered: that output says nothing of the version (the calls compare apart)."""
    stable = {
        "output": {"notify": {"queued": True, "id": "m-17"}, "queue": "billing"},
        "reply": "x",
        "steps": {"notify": {"output": {"queued": True, "id": "m-17"}}},
    }
    canary = {
        "output": {"notify": {"status": 0, "dryRun": True}, "queue": "billing"},
        "reply": "x",
        "steps": {"notify": {"output": {"status": 0, "dryRun": True}, "dry_run": True}},
    }
    assert await score(stable, canary) == 1.0
    changed = {**canary, "output": {**canary["output"], "queue": "refunds"}}
    assert await score(stable, changed) == 0.0  # what the version decided still counts


async def test_pairs_where_a_side_failed_are_not_scored() -> None:
    pairs = [pair(0, answer(reply("a")), answer(None, status=500))]
    assert await shadow_compare.score_pairs(pairs, TableScorer()) == {}


async def test_the_real_model_scores_a_paraphrase_high_and_an_unrelated_answer_low() -> None:
    stable = reply("Thank you for the kind words; we are sorry the parking was slow.")
    paraphrase = reply("Thanks so much for your kind words! Sorry that parking took so long.")
    unrelated = reply("The quarterly tax filing deadline moves to the last Friday of April.")
    scores = await shadow_compare.score_pairs(
        [pair(0, answer(stable), answer(paraphrase)), pair(1, answer(stable), answer(unrelated))],
        SentenceEmbedder(),
    )
    assert scores["canary-0"] > 0.7 > 0.3 > scores["canary-1"]


# --- figures and verdict ----------------------------------------------------------------


PLAN = Shadow(percent=20, calls=10, maxDuration="60s")


def judged(
    pairs: list[ShadowPair], scores: dict[str, float], plan: Shadow = PLAN, elapsed_s: float = 1.0
) -> shadow_compare.Judgement:
    found = shadow_compare.figures(shadow_compare.of_saga(pairs, SAGA), scores, plan)
    return shadow_compare.judge(found, plan, elapsed_s=elapsed_s)


def canaries(n: int, **candidate: Any) -> list[ShadowPair]:
    return [pair(i, answer(reply("s")), answer(reply("c"), **candidate)) for i in range(n)]


def noises(n: int) -> list[ShadowPair]:
    return [pair(i, answer(reply("s")), answer(reply("s2")), kind=PairKind.NOISE) for i in range(n)]


def scored(pairs: list[ShadowPair], value: float) -> dict[str, float]:
    return {p.pair_id: value for p in pairs}


def test_similar_answers_pass_after_n_pairs_and_hold_before() -> None:
    pairs, noise = canaries(10), noises(4)
    scores = {**scored(pairs, 0.95), **scored(noise, 0.96)}
    assert judged(pairs[:9] + noise, scores).outcome is Outcome.HOLD
    passed = judged(pairs + noise, scores)
    assert passed.outcome is Outcome.PASS
    figures = passed.figures
    assert (figures.pairs, figures.noise_pairs, figures.similarity, figures.noise_similarity) == (
        10,
        4,
        0.95,
        0.96,
    )
    assert figures.passed and figures.reason.startswith("10 pairs: median similarity 0.95")


def test_a_low_median_fails_naming_the_figure_and_the_noise_floor() -> None:
    pairs, noise = canaries(10), noises(4)
    failed = judged(pairs + noise, {**scored(pairs, 0.71), **scored(noise, 0.93)})
    assert failed.outcome is Outcome.FAIL
    assert failed.figures.reason == "median similarity 0.71 < 0.85; stable vs stable 0.93"


def test_a_median_below_the_noise_floor_by_more_than_the_drop_fails() -> None:
    pairs, noise = canaries(10), noises(4)
    failed = judged(pairs + noise, {**scored(pairs, 0.90), **scored(noise, 0.97)})
    assert failed.outcome is Outcome.FAIL
    assert failed.figures.reason == (
        "median similarity 0.90 is 0.07 below stable vs stable 0.97 > maxSimilarityDrop 0.02"
    )
    within = judged(pairs + noise, {**scored(pairs, 0.95), **scored(noise, 0.97)})
    assert within.outcome is Outcome.PASS


@pytest.mark.parametrize(
    ("candidate", "reason"),
    [
        ({"cost": 0.02}, "cost ratio 2.00 > maxCostRatio 1.1"),
        ({"latency_ms": 130.0}, "p95 ratio 1.30 > maxP95Ratio 1.2"),
    ],
    ids=["cost", "p95"],
)
def test_cost_and_latency_ratios_fail_at_n(candidate: dict[str, Any], reason: str) -> None:
    pairs = canaries(10, **candidate)
    assert judged(pairs[:9], scored(pairs, 1.0)).outcome is Outcome.HOLD
    failed = judged(pairs, scored(pairs, 1.0))
    assert (failed.outcome, failed.figures.reason) == (Outcome.FAIL, reason)


def test_ratios_exactly_at_their_budget_pass() -> None:
    pairs = canaries(10, cost=0.011, latency_ms=120.0)
    assert judged(pairs, scored(pairs, 1.0)).outcome is Outcome.PASS


def test_errors_beyond_the_delta_fail_early_even_if_every_remaining_pair_succeeds() -> None:
    plan = Shadow(percent=20, calls=200, compare={"maxErrorPercentDelta": 1})
    ok_pairs = canaries(10)
    bad = [pair(100 + i, answer(reply("s")), answer(None, status=502)) for i in range(2)]
    # 2 of 200 = 1 point: not certain yet; a third error is
    assert judged(ok_pairs + bad, scored(ok_pairs, 1.0), plan).outcome is Outcome.HOLD
    third = pair(103, answer(reply("s")), answer(None, status=502))
    failed = judged(ok_pairs + bad + [third], scored(ok_pairs, 1.0), plan)
    assert failed.outcome is Outcome.FAIL
    assert failed.figures.reason.startswith("canary errors 3 (stable 0) already put the error")


def test_tool_calls_differing_fail_early_once_over_the_share_of_n() -> None:
    plan = Shadow(percent=20, calls=100, compare={"maxToolCallDiffPercent": 2})
    refund = (EffectCall(tool="crm.refund", input_sha256="a" * 64),)
    differing = [pair(i, answer(reply("s")), answer(reply("s"), effects=refund)) for i in range(3)]
    assert judged(differing[:2], {}, plan).outcome is Outcome.HOLD
    failed = judged(differing, {}, plan)
    assert failed.outcome is Outcome.FAIL
    assert "tool calls already differ in 3 pairs" in failed.figures.reason
    assert failed.figures.tool_call_diff_percent == 100.0


def test_effects_in_another_order_are_the_same_calls() -> None:
    a, b = (
        EffectCall(tool="t.a", input_sha256="1" * 64),
        EffectCall(tool="t.b", input_sha256="2" * 64),
    )
    pairs = [
        pair(i, answer(reply("s"), effects=(a, b)), answer(reply("s"), effects=(b, a)))
        for i in range(10)
    ]
    assert judged(pairs, scored(pairs, 1.0)).figures.tool_call_diff_percent == 0.0


def test_more_than_half_below_min_similarity_fails_before_n() -> None:
    pairs = canaries(6)
    assert judged(pairs[:5], scored(pairs, 0.2)).outcome is Outcome.HOLD
    failed = judged(pairs, scored(pairs, 0.2))
    assert failed.outcome is Outcome.FAIL
    assert failed.figures.reason.startswith("6 of 10 pairs already score below minSimilarity 0.85")


def test_too_few_pairs_by_max_duration_fail_never_pass_empty() -> None:
    assert judged([], {}, elapsed_s=59.9).outcome is Outcome.HOLD
    failed = judged([], {}, elapsed_s=60.0)
    assert failed.outcome is Outcome.FAIL
    assert failed.figures.reason == "only 0 of 10 pairs within maxDuration 60s"


def test_spending_the_budget_before_n_fails_with_that_reason() -> None:
    plan = Shadow(percent=20, calls=10, budgetUsd=0.05)
    pairs = canaries(4)
    noise = noises(1)  # the noise floor's calls count: 5 x $0.01
    assert judged(pairs[:3] + noise, scored(pairs + noise, 1.0), plan).outcome is Outcome.HOLD
    failed = judged(pairs + noise, scored(pairs + noise, 1.0), plan)
    assert failed.outcome is Outcome.FAIL
    assert (
        failed.figures.reason == "shadow calls spent $0.0500 of budgetUsd 0.05 with 4 of 10 pairs"
    )


def test_only_this_sagas_pairs_and_only_the_first_n_count() -> None:
    # the older saga's pairs came first: counted, they would be the first N
    pairs = canaries(12)
    other = [
        pair(i - 10, answer(reply("s")), answer(None, status=500), saga="default.shop.1.1")
        for i in range(5)
    ]
    found = shadow_compare.figures(
        shadow_compare.of_saga(pairs + other, SAGA), scored(pairs, 1.0), PLAN
    )
    assert (found.status.pairs, found.canary_errors) == (10, 0)


def test_the_worst_examples_come_first_cut_to_a_few_kb() -> None:
    pairs = [pair(i, answer(reply("s" * 5000)), answer(reply(f"c{i}"))) for i in range(5)]
    scores = {p.pair_id: 0.5 + i / 10 for i, p in enumerate(pairs)}
    examples = shadow_compare.figures(pairs, scores, PLAN).status.examples
    assert [e.score for e in examples] == [0.5, 0.6, 0.7]
    assert len(examples[0].stable) == 2000 and examples[0].stable.endswith("…")
    assert examples[0].input == '{"text":"call 0"}'
    assert examples[0].canary == '"c0"'  # as compared: the reply text, not the whole body
    failed = pair(9, answer(reply("s")), answer({"error": "boom"}, status=500))
    shown = shadow_compare.figures([failed], {}, PLAN).status.examples[0]
    assert (shown.canary, shown.score) == ('{"status":500,"body":{"error":"boom"}}', 0.0)
