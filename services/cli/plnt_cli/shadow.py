"""``plnt shadow NAME``: a run's shadow figures and its least similar pairs side by side.

Everything comes from ``status.shadow`` (the promoter's latest figures, folded by the
watcher), so it reads the same while the run is Shadowing and after its verdict.
"""

import json
from typing import Any

from plnt_cli import render
from plnt_cli.commands import Session
from plnt_common.errors import ResourceNotFound
from plnt_common.resources import SHADOW_JUDGING
from plnt_common.status import Phase

CELL_CHARS = 48
"""Each side of an example is cut to this many characters in the table (-o shows all)."""


async def shadow(session: Session, *, name: str, namespace: str, output: str | None) -> str:
    """What ``plnt shadow`` prints; raises ``ResourceNotFound`` for an unknown run."""
    stored = await session.store.get("WorkflowRun", namespace, name)
    if stored is None:
        raise ResourceNotFound(f"workflowruns {name!r} not found in namespace {namespace!r}")
    body = stored.body
    figures = (body.get("status") or {}).get("shadow")
    if output:
        return render.as_document(figures or {}, output)
    return shadow_report(body)


def shadow_report(body: dict[str, Any]) -> str:
    """The figures, the verdict and the worst pairs; one line when the run never shadowed."""
    name = body["metadata"]["name"]
    status = body.get("status") or {}
    phase = status.get("phase", "Pending")
    figures = status.get("shadow")
    if not figures:
        planned = ((body.get("spec") or {}).get("canary") or {}).get("shadow") or {}
        if planned.get("percent"):
            return f"workflowrun/{name} has not shadowed yet (phase {phase})"
        return f"workflowrun/{name} never shadowed: spec.canary.shadow.percent is 0 or unset"
    verdict = _verdict(phase, figures, status.get("message", ""))
    lines = [f"workflowrun/{name}: {verdict}"]
    lines.append(
        render.table(
            [
                "PAIRS",
                "NOISE PAIRS",
                "SIMILARITY",
                "STABLE VS STABLE",
                "COST RATIO",
                "P95 RATIO",
                "ERROR % DELTA",
                "TOOL CALLS DIFFER",
                "SPENT",
            ],
            [
                [
                    f"{figures.get('pairs', 0)}/{figures.get('calls', 0)}",
                    str(figures.get("noisePairs", 0)),
                    _number(figures.get("similarity")),
                    _number(figures.get("noiseSimilarity")),
                    _number(figures.get("costRatio")),
                    _number(figures.get("p95Ratio")),
                    f"{figures.get('errorPercentDelta', 0.0):.1f}",
                    f"{figures.get('toolCallDiffPercent', 0.0):.1f}%",
                    f"${figures.get('spentUsd', 0.0):.4f}",
                ]
            ],
        )
    )
    examples = figures.get("examples") or []
    if examples:
        lines.append("")
        lines.append("least similar pairs (plnt shadow NAME -o yaml shows them whole):")
        rows = [
            [
                _number(example.get("score")),
                _cell(example.get("input", "")),
                _cell(example.get("stable", "")),
                _cell(example.get("canary", "")),
            ]
            for example in examples
        ]
        lines.append(render.table(["SCORE", "INPUT", "STABLE ANSWER", "CANARY ANSWER"], rows))
    return "\n".join(lines)


def _verdict(phase: str, figures: dict[str, Any], message: str) -> str:
    reason = figures.get("reason") or ""
    if figures.get("passed"):
        return f"shadow passed: {reason}"
    if reason and not reason.startswith(SHADOW_JUDGING):
        return f"shadow failed: {reason}"
    if phase == Phase.SHADOWING:
        return f"shadowing, {reason}" if reason else "shadowing, no pairs yet"
    return f"shadow ended without a verdict (phase {phase}): {message}"


def _number(value: Any) -> str:
    return "-" if value is None else f"{float(value):.2f}"


def _cell(text: str) -> str:
    """One line of at most ``CELL_CHARS``: newlines shown as \\n, longer text cut with …"""
    flat = json.dumps(text)[1:-1] if "\n" in text else text
    return flat if len(flat) <= CELL_CHARS else flat[: CELL_CHARS - 1] + "…"
