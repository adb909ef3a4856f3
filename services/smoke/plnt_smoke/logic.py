"""Pure smoke figures and verdict; imports no I/O library."""

import math
from dataclasses import dataclass

from plnt_common.events import CanaryInstalled, SmokeFigures
from plnt_common.golden import GoldenResult
from plnt_common.resources import SmokeTest
from plnt_common.status import Reason
from plnt_smoke.golden import describe_failures


@dataclass(frozen=True)
class Sample:
    """One smoke invocation: how long it took and whether it succeeded."""

    latency_ms: float
    ok: bool
    error: str = ""


def tested_copies(data: CanaryInstalled) -> list[tuple[str, str]]:
    """(backend, url) of each copy the smoke test calls, the budget's first: every copy,
    or a walk's later copy alone."""
    canary = data.canary
    copies = [(canary.backend, canary.url), *((c.backend, c.url) for c in canary.spread)]
    if data.continues_walk():
        return [copy for copy in copies if copy[0] == data.backend]
    return copies


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def judge(
    samples: list[Sample], budget: SmokeTest, golden: tuple[GoldenResult, ...] = ()
) -> SmokeFigures:
    """Figures over all samples; passed when p95 and the error rate are within budget
    and every golden case passed (the failed cases are named in the reason)."""
    latencies = [s.latency_ms for s in samples]
    errors = [s for s in samples if not s.ok]
    error_percent = 100.0 * len(errors) / len(samples) if samples else 100.0
    p50, p95 = percentile(latencies, 0.50), percentile(latencies, 0.95)
    problems = []
    if error_percent > budget.error_budget_percent:
        first = errors[0].error if errors else "no invocations"
        problems.append(
            f"error rate {error_percent:.1f}% over budget {budget.error_budget_percent:g}% "
            f"(first error: {first})"
        )
    if p95 > budget.p95_budget_ms:
        problems.append(f"p95 {p95:.0f} ms over budget {budget.p95_budget_ms:g} ms")
    golden_failures = describe_failures(golden)
    if golden_failures:
        problems.insert(0, golden_failures)
    passed = not problems
    golden_passed = f", golden cases {len(golden)}/{len(golden)} passed" if golden else ""
    reason = (
        f"p95 {p95:.0f} ms <= {budget.p95_budget_ms:g} ms, "
        f"errors {error_percent:.1f}% <= {budget.error_budget_percent:g}%{golden_passed}"
        if passed
        else "; ".join(problems)
    )
    return SmokeFigures(
        invocations=len(samples),
        p50_ms=round(p50, 2),
        p95_ms=round(p95, 2),
        error_percent=round(error_percent, 2),
        passed=passed,
        reason=reason,
        golden=golden,
    )


def contract_missed(misses: str) -> SmokeFigures:
    """The verdict on a canary that missed the runner contract (``misses`` names the
    clauses): failed before any budget invocation, reason RunnerContract."""
    return SmokeFigures(passed=False, reason=misses, failure=Reason.RUNNER_CONTRACT)
