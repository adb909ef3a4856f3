"""The shadow phase's judgement: mirrored answers scored, figured and judged. No I/O.

How a pair scores (0..1, 1: the same answer):
- The runner answers ``{"output": ..., "reply": ..., "usage": ...}``. When the stable's
  ``output`` is a JSON object or array, the pair compares field by field, even when the
  workflow also replies in text; otherwise it compares ``reply`` as text (or ``output``
  when that is the text), by the similarity of sentence embeddings (the golden cases'
  model, through the ``SimilarityScorer`` port).
- Field by field: both outputs are flattened to their leaves by JSON path (object keys,
  array indexes). Each path of either side scores: equal scalars 1, unequal 0 (``1`` and
  ``1.0`` are equal, ``true`` and ``1`` are not); two strings their text similarity
  (1 when equal, without the model); a path on one side only 0. The pair's score is the
  mean over the paths (two empty outputs: 1).
- The outputs of steps either side answered with their dry run (``steps.<id>.dry_run``:
  a side-effect step in a shadow call) are left out: the side effects compare apart, by
  tool and input.
- Only pairs where both sides answered 2xx are scored; the others count in the error
  figure. A body that is not the runner's shape is compared whole, as above.

The figures: N canary pairs (the first ``calls`` by time), the median score of canary
pairs and of noise pairs (stable vs stable: the noise floor), mean cost canary/stable,
p95 latency canary/stable (nearest rank), error percent delta (canary non-2xx minus
stable non-2xx, in points of N), tool-call diff percent (pairs whose side-effect calls
differ, compared as multisets since concurrent steps finish in any order), and what the
shadow calls spent (the canary's side of canary pairs plus the second stable answer of
noise pairs; the caller's own answer is live traffic, not shadow spend).
"""

import json
import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from plnt_common.embeddings import SimilarityScorer
from plnt_common.resources import (
    EXAMPLE_TEXT_CHARS,
    SHADOW_JUDGING,
    Shadow,
    ShadowCompare,
    ShadowExample,
    ShadowStatus,
)
from plnt_common.shadow_pairs import PairKind, ShadowAnswer, ShadowPair

WORST_EXAMPLES = 3
"""How many of the least similar pairs status keeps."""
_TEXT = object()
"""Marks a leaf compared as text (see ``_leaves``)."""


class Outcome(StrEnum):
    HOLD = "hold"
    PASS = "pass"
    FAIL = "fail"


@dataclass(frozen=True)
class Judgement:
    outcome: Outcome
    figures: ShadowStatus


# --- scoring -------------------------------------------------------------------------------


def ok(answer: ShadowAnswer) -> bool:
    return 200 <= answer.status < 300


def _compared(body: Any) -> tuple[bool, Any]:
    """(structured, value): the output when it is a JSON object or array, else the text."""
    if isinstance(body, dict) and ("output" in body or "reply" in body):
        output, reply = body.get("output"), body.get("reply")
        if isinstance(output, dict | list):
            return True, output
        if isinstance(reply, str):
            return False, reply
        return False, output
    return isinstance(body, dict | list), body


def _leaves(value: Any, path: str = "$") -> dict[str, Any]:
    """Each scalar of a JSON value by its path."""
    if isinstance(value, dict):
        found: dict[str, Any] = {}
        for key, item in value.items():
            found.update(_leaves(item, f"{path}.{key}"))
        return found
    if isinstance(value, list):
        found = {}
        for index, item in enumerate(value):
            found.update(_leaves(item, f"{path}[{index}]"))
        return found
    return {path: value}


def _same_scalar(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


@dataclass(frozen=True)
class _Plan:
    """How one pair scores: fixed parts and the text comparisons it waits for."""

    fixed: tuple[float, ...]
    texts: tuple[tuple[str, str], ...]


def _dry_run_steps(body: Any) -> set[str]:
    """Steps that answered their dry run (``steps.<id>.dry_run``): a side-effect step in a
    shadow call, whose output says nothing about the version that made the call."""
    steps = body.get("steps") if isinstance(body, dict) else None
    if not isinstance(steps, dict):
        return set()
    return {k for k, v in steps.items() if isinstance(v, dict) and v.get("dry_run") is True}


def _without(body: Any, step_ids: set[str]) -> Any:
    """``body`` with the outputs of ``step_ids`` left out of its ``output``."""
    output = body.get("output") if isinstance(body, dict) else None
    if not step_ids or not isinstance(output, dict):
        return body
    kept = {k: v for k, v in output.items() if k not in step_ids}
    return {**body, "output": kept}


def _plan(stable: Any, candidate: Any) -> _Plan:
    # The side effects themselves are compared apart (``effects``): their dry answers are
    # not the version's answer, on either side of the pair.
    dry = _dry_run_steps(stable) | _dry_run_steps(candidate)
    structured, reference = _compared(_without(stable, dry))
    other_structured, other = _compared(_without(candidate, dry))
    if structured != other_structured:
        return _Plan(fixed=(0.0,), texts=())
    if not structured:
        if isinstance(reference, str) and isinstance(other, str):
            return _Plan((), ((reference, other),)) if reference != other else _Plan((1.0,), ())
        return _Plan(fixed=(1.0 if _same_scalar(reference, other) else 0.0,), texts=())
    left, right = _leaves(reference), _leaves(other)
    if not left and not right:
        return _Plan(fixed=(1.0,), texts=())
    fixed: list[float] = []
    texts: list[tuple[str, str]] = []
    for path in {**left, **right}:
        if path not in left or path not in right:
            fixed.append(0.0)
        elif isinstance(left[path], str) and isinstance(right[path], str):
            if left[path] == right[path]:
                fixed.append(1.0)
            else:
                texts.append((left[path], right[path]))
        else:
            fixed.append(1.0 if _same_scalar(left[path], right[path]) else 0.0)
    return _Plan(tuple(fixed), tuple(texts))


async def score_pairs(pairs: Sequence[ShadowPair], scorer: SimilarityScorer) -> dict[str, float]:
    """Each scorable pair's score by ``pair_id`` (pairs where a side failed are left out),
    with one call of ``scorer`` for all their texts. Raises what the scorer raises."""
    plans = {
        pair.pair_id: _plan(pair.stable.body, pair.candidate.body)
        for pair in pairs
        if ok(pair.stable) and ok(pair.candidate)
    }
    texts = [text for plan in plans.values() for text in plan.texts]
    similarities = iter(
        await scorer.similarities(texts=[a for a, _ in texts], references=[b for _, b in texts])
        if texts
        else []
    )
    scores = {}
    for pair_id, plan in plans.items():
        parts = [*plan.fixed, *(_clamped(next(similarities)) for _ in plan.texts)]
        scores[pair_id] = statistics.fmean(parts)
    return scores


def _clamped(similarity: float) -> float:
    """Cosine similarity is -1..1; a score is 0..1 (opposite meaning scores as unrelated)."""
    return min(1.0, max(0.0, similarity))


# --- figures -------------------------------------------------------------------------------


def of_saga(pairs: Iterable[ShadowPair], saga_id: str) -> list[ShadowPair]:
    """This saga's pairs, oldest first (a pair of an older or newer saga is ignored)."""
    return sorted((p for p in pairs if p.saga_id == saga_id), key=lambda p: (p.at, p.pair_id))


def p95(values: Sequence[float]) -> float:
    """Nearest-rank 95th percentile; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _ratio(canary: float, stable: float) -> float | None:
    """canary / stable; None when the stable's figure is 0 (nothing to compare against)."""
    return round(canary / stable, 4) if stable > 0 else None


def _percent(count: int, of: int) -> float:
    return 100.0 * count / of if of else 0.0


def _effects_differ(pair: ShadowPair) -> bool:
    return Counter(pair.stable.effects) != Counter(pair.candidate.effects)


def _text(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    if len(text) <= EXAMPLE_TEXT_CHARS:
        return text
    return text[: EXAMPLE_TEXT_CHARS - 1] + "…"


def worst_examples(
    pairs: Sequence[ShadowPair], scores: Mapping[str, float]
) -> tuple[ShadowExample, ...]:
    """The least similar canary pairs, worst first (a failed side scores 0 here); each
    answer as it was compared (the output, or the reply text), a failed one as its status."""
    ranked = sorted(pairs, key=lambda p: (scores.get(p.pair_id, 0.0), p.at))
    return tuple(
        ShadowExample(
            input=_text(pair.input),
            stable=_shown(pair.stable),
            canary=_shown(pair.candidate),
            score=round(scores.get(pair.pair_id, 0.0), 4),
        )
        for pair in ranked[:WORST_EXAMPLES]
    )


def _shown(answer: ShadowAnswer) -> str:
    if not ok(answer):
        return _text({"status": answer.status, "body": answer.body})
    return _text(_compared(answer.body)[1])


@dataclass(frozen=True)
class Figures:
    """What the verdict reads, beside the status it is shown as."""

    status: ShadowStatus
    canary_errors: int
    stable_errors: int
    differing_effects: int
    below_min_similarity: int


def figures(pairs: Sequence[ShadowPair], scores: Mapping[str, float], plan: Shadow) -> Figures:
    """The figures of one saga's pairs (``of_saga``) given their scores."""
    canary = [p for p in pairs if p.kind is PairKind.CANARY][: plan.calls]
    noise = [p for p in pairs if p.kind is PairKind.NOISE]
    canary_scores = [scores[p.pair_id] for p in canary if p.pair_id in scores]
    noise_scores = [scores[p.pair_id] for p in noise if p.pair_id in scores]
    canary_errors = sum(not ok(p.candidate) for p in canary)
    stable_errors = sum(not ok(p.stable) for p in canary)
    differing = sum(_effects_differ(p) for p in canary)
    n = len(canary)
    status = ShadowStatus(
        pairs=n,
        calls=plan.calls,
        noise_pairs=len(noise),
        similarity=round(statistics.median(canary_scores), 4) if canary_scores else None,
        noise_similarity=round(statistics.median(noise_scores), 4) if noise_scores else None,
        cost_ratio=_ratio(
            statistics.fmean(p.candidate.cost_usd for p in canary) if canary else 0.0,
            statistics.fmean(p.stable.cost_usd for p in canary) if canary else 0.0,
        ),
        p95_ratio=_ratio(
            p95([p.candidate.latency_ms for p in canary]),
            p95([p.stable.latency_ms for p in canary]),
        ),
        error_percent_delta=round(_percent(canary_errors - stable_errors, n), 4),
        tool_call_diff_percent=round(_percent(differing, n), 4),
        spent_usd=round(
            sum(p.candidate.cost_usd for p in canary) + sum(p.candidate.cost_usd for p in noise),
            6,
        ),
        examples=worst_examples(canary, scores),
    )
    below = sum(score < plan.compare.min_similarity for score in canary_scores)
    return Figures(status, canary_errors, stable_errors, differing, below)


# --- verdict -------------------------------------------------------------------------------


def judge(found: Figures, plan: Shadow, *, elapsed_s: float) -> Judgement:
    """PASS or FAIL once ``plan.calls`` canary pairs are in; FAIL earlier when the budget is
    spent, when a budget is broken whatever the remaining pairs bring, or when
    ``maxDuration`` passed with too few pairs; HOLD otherwise."""
    status = found.status
    n, wanted = status.pairs, plan.calls
    if n >= wanted:
        problems = _final_problems(status, plan.compare)
        if problems:
            return _fail(status, "; ".join(problems))
        return Judgement(
            Outcome.PASS, status.model_copy(update={"passed": True, "reason": _summary(status)})
        )
    if plan.budget_usd is not None and status.spent_usd >= plan.budget_usd:
        return _fail(
            status,
            f"shadow calls spent ${status.spent_usd:.4f} of budgetUsd {plan.budget_usd:g} "
            f"with {n} of {wanted} pairs",
        )
    certain = _certain_problems(found, plan)
    if certain:
        return _fail(status, "; ".join(certain))
    if elapsed_s >= plan.max_duration_s:
        return _fail(status, f"only {n} of {wanted} pairs within maxDuration {plan.max_duration}")
    return Judgement(
        Outcome.HOLD,
        status.model_copy(update={"reason": f"{SHADOW_JUDGING}: {n} of {wanted} pairs"}),
    )


def _fail(status: ShadowStatus, reason: str) -> Judgement:
    return Judgement(Outcome.FAIL, status.model_copy(update={"passed": False, "reason": reason}))


def _noise(status: ShadowStatus) -> str:
    return f"{status.noise_similarity:.2f}" if status.noise_similarity is not None else "unmeasured"


def _final_problems(status: ShadowStatus, compare: ShadowCompare) -> list[str]:
    problems = []
    similarity, noise = status.similarity, status.noise_similarity
    if similarity is None:
        problems.append(f"no pair scored: in none of {status.pairs} pairs did both answer 2xx")
    elif similarity < compare.min_similarity:
        problems.append(
            f"median similarity {similarity:.2f} < {compare.min_similarity:g}; "
            f"stable vs stable {_noise(status)}"
        )
    elif noise is not None and similarity < noise - compare.max_similarity_drop:
        problems.append(
            f"median similarity {similarity:.2f} is {noise - similarity:.2f} below stable vs "
            f"stable {noise:.2f} > maxSimilarityDrop {compare.max_similarity_drop:g}"
        )
    if status.cost_ratio is not None and status.cost_ratio > compare.max_cost_ratio:
        problems.append(
            f"cost ratio {status.cost_ratio:.2f} > maxCostRatio {compare.max_cost_ratio:g}"
        )
    if status.p95_ratio is not None and status.p95_ratio > compare.max_p95_ratio:
        problems.append(f"p95 ratio {status.p95_ratio:.2f} > maxP95Ratio {compare.max_p95_ratio:g}")
    if status.error_percent_delta > compare.max_error_percent_delta:
        problems.append(
            f"error percent delta {status.error_percent_delta:.1f} > maxErrorPercentDelta "
            f"{compare.max_error_percent_delta:g}"
        )
    if status.tool_call_diff_percent > compare.max_tool_call_diff_percent:
        problems.append(
            f"tool calls differ in {status.tool_call_diff_percent:.1f}% of pairs > "
            f"maxToolCallDiffPercent {compare.max_tool_call_diff_percent:g}"
        )
    return problems


def _certain_problems(found: Figures, plan: Shadow) -> list[str]:
    """Budgets broken before N whatever the remaining pairs (assumed to succeed on both
    sides and to agree): the figures at N could only be better by that much."""
    wanted, compare = plan.calls, plan.compare
    problems = []
    delta_at_best = _percent(found.canary_errors - found.stable_errors, wanted)
    if delta_at_best > compare.max_error_percent_delta:
        problems.append(
            f"canary errors {found.canary_errors} (stable {found.stable_errors}) already put "
            f"the error percent delta over maxErrorPercentDelta "
            f"{compare.max_error_percent_delta:g} of {wanted} pairs"
        )
    if _percent(found.differing_effects, wanted) > compare.max_tool_call_diff_percent:
        problems.append(
            f"tool calls already differ in {found.differing_effects} pairs, over "
            f"maxToolCallDiffPercent {compare.max_tool_call_diff_percent:g} of {wanted} pairs"
        )
    if found.below_min_similarity > wanted // 2:
        problems.append(
            f"{found.below_min_similarity} of {wanted} pairs already score below "
            f"minSimilarity {compare.min_similarity:g}: the median cannot reach it"
        )
    return problems


def _summary(status: ShadowStatus) -> str:
    def ratio(value: float | None) -> str:
        return f"{value:.2f}" if value is not None else "n/a"

    similarity = f"{status.similarity:.2f}" if status.similarity is not None else "n/a"
    return (
        f"{status.pairs} pairs: median similarity {similarity} (stable vs stable "
        f"{_noise(status)}), cost ratio {ratio(status.cost_ratio)}, p95 ratio "
        f"{ratio(status.p95_ratio)}, error percent delta {status.error_percent_delta:.1f}, "
        f"tool calls differ in {status.tool_call_diff_percent:.1f}%"
    )
