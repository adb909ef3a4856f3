"""Judging golden cases: every rule of a case's ``expect`` on the canary's reply text.

Pure: the reply comes from the harness, the similarity score from the embedder port.
"""

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from plnt_common.golden import GoldenCase, GoldenExpect, GoldenResult

MAX_REPLY_CHARS = 64 * 1024
"""Rules see at most this much of a reply, which bounds what a user's regex can cost."""


@dataclass(frozen=True)
class GoldenAnswer:
    """The canary's answer to one golden case: its reply text, or why there is none."""

    text: str | None
    error: str = ""


@dataclass(frozen=True)
class Similarity:
    """The score of a reply against ``similarTo``, or why it could not be scored."""

    score: float | None
    problem: str = ""


def reply_text(body: Any) -> str | None:
    """The workflow's reply text in a runner's invoke response; None when it has no output.

    The reply is the runner's ``reply`` (the step the Workflow's ``spec.reply`` names, by
    default its last ``llm.generate`` step), also found as ``output.reply``; without one,
    the only sink step's text, else the whole output as JSON, so rules see what came back.
    """
    if not isinstance(body, dict) or "output" not in body:
        return None
    if isinstance(body.get("reply"), str):
        return str(body["reply"])
    output = body["output"]
    if isinstance(output, dict):
        if isinstance(output.get("reply"), str):
            return str(output["reply"])
        if len(output) == 1:
            (output,) = output.values()
    if isinstance(output, str):
        return output
    if isinstance(output, dict) and isinstance(output.get("text"), str):
        return str(output["text"])
    return json.dumps(output, sort_keys=True, ensure_ascii=False)


def judge_case(case: GoldenCase, answer: GoldenAnswer, similarity: Similarity) -> GoldenResult:
    """The case's result: passed when the canary answered and every rule held."""
    if answer.text is None:
        return GoldenResult(name=case.name, passed=False, reason=f"no reply: {answer.error}")
    failures = rule_failures(case.expect, answer.text[:MAX_REPLY_CHARS], similarity)
    score = None if similarity.score is None else round(similarity.score, 3)
    if failures:
        return GoldenResult(
            name=case.name, passed=False, reason="; ".join(failures), similarity=score
        )
    held = "all rules held" if score is None else f"all rules held (similarity {score:.2f})"
    return GoldenResult(name=case.name, passed=True, reason=held, similarity=score)


def rule_failures(expect: GoldenExpect, text: str, similarity: Similarity) -> list[str]:
    """One reason per rule that does not hold on ``text``, in the order rules are listed."""
    failures = [
        f"contains {_quoted(wanted)} missing" for wanted in expect.contains if wanted not in text
    ]
    failures += [
        f"notContains {_quoted(unwanted)} present"
        for unwanted in expect.not_contains
        if unwanted in text
    ]
    if expect.matches is not None and re.search(expect.matches, text) is None:
        failures.append(f"matches {_quoted(expect.matches)} not found")
    if expect.similar_to is not None:
        threshold = expect.similarity_threshold
        if similarity.score is None:
            failures.append(f"similarity not scored: {similarity.problem}")
        elif similarity.score < threshold:
            digits = 2 if f"{similarity.score:.2f}" != f"{threshold:.2f}" else 4
            failures.append(f"similarity {similarity.score:.{digits}f} < {threshold:.2f}")
    return failures


def describe_failures(results: Sequence[GoldenResult]) -> str:
    """Every failed case with its reasons, for the verdict; "" when none failed."""
    failed = [result for result in results if not result.passed]
    if not failed:
        return ""
    if len(failed) == 1:
        return f"golden case {failed[0].name} failed: {failed[0].reason}"
    cases = ", ".join(f"{result.name} ({result.reason})" for result in failed)
    return f"{len(failed)} golden cases failed: {cases}"


def _quoted(text: str, limit: int = 60) -> str:
    shown = text if len(text) <= limit else text[: limit - 1] + "…"
    return json.dumps(shown, ensure_ascii=False)
