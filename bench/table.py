"""One row per figure, with its reference, its target and a verdict; printed as markdown.

A figure that could not be measured (a missing tool) is a ``skipped`` row whose text says
why and how to get the tool: the table never holds an invented number.
"""

from dataclasses import dataclass
from enum import StrEnum


class Verdict(StrEnum):
    """How a figure compares with its target."""

    PASS = "pass"
    """The target is met."""
    MISS = "**miss**"
    """The target is not met."""
    INFO = "info"
    """A figure without a target (shown for context)."""
    SKIPPED = "skipped"
    """Not measured; the row says why."""


@dataclass(frozen=True)
class Row:
    figure: str
    measured: str
    reference: str
    target: str
    verdict: Verdict

    @classmethod
    def check(cls, figure: str, measured: str, reference: str, target: str, ok: bool) -> "Row":
        return cls(figure, measured, reference, target, Verdict.PASS if ok else Verdict.MISS)

    @classmethod
    def skipped(cls, figure: str, why: str, target: str = "") -> "Row":
        return cls(figure, f"skipped: {why}", "", target, Verdict.SKIPPED)


def render(title: str, rows: list[Row], *, note: str = "") -> str:
    lines = [f"### {title}", ""]
    if note:
        lines += [note, ""]
    lines += [
        "| figure | measured | reference | target | result |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        cells = (row.figure, row.measured, row.reference, row.target, str(row.verdict))
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)
