"""Live figures of a workflow's revisions: what step analysis and the guard judge.

The router counts every call it serves (revision, status, latency) and the runner every
call's tokens and cost; a ``FiguresSource`` reads those counts back as cumulative totals
per revision, the way Prometheus counters are read. A window is the difference of two
readings, so the hot path only ever increments counters and nothing is stored per call.

This module holds the shapes, the port and the arithmetic both sides share: a window
between two readings with Prometheus's counter-reset rule, totals summed over sources that
restart (``ResetAwareTotals``), and quantiles from buckets as ``histogram_quantile``
computes them. It imports no I/O library. The adapters (the bus-published router totals,
PromQL on Kubernetes) live with the service that reads them.
"""

import math
from collections.abc import Mapping
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from plnt_common.errors import PlntError


class FiguresUnavailable(PlntError):
    """The live figures cannot be read now (bus or Prometheus unreachable): try later."""

    retryable = True
    reason = "FiguresUnavailable"


class RevisionTotals(BaseModel):
    """Cumulative counts of one revision since its counters started (they only grow)."""

    # The +Inf bucket bound travels as JSON's customary ``Infinity``, not as null.
    model_config = ConfigDict(frozen=True, ser_json_inf_nan="constants")

    invocations: int = Field(default=0, ge=0, description="Calls answered, any status.")
    errors: int = Field(default=0, ge=0, description="Calls answered with a 5xx status.")
    latency_buckets: tuple[tuple[float, int], ...] = Field(
        default=(),
        description="(upper bound in seconds, cumulative count), ascending, as a "
        "Prometheus histogram's buckets; the last bound may be +Inf.",
    )
    tokens: int = Field(default=0, ge=0, description="LLM tokens, prompt plus completion.")
    cost_usd: float = Field(default=0.0, ge=0, description="LLM cost at the backend's prices.")

    def plus(self, other: "RevisionTotals") -> "RevisionTotals":
        """The sum of two sources' totals (two router replicas, say)."""
        return RevisionTotals(
            invocations=self.invocations + other.invocations,
            errors=self.errors + other.errors,
            latency_buckets=_merge_buckets(self.latency_buckets, other.latency_buckets, sign=1),
            tokens=self.tokens + other.tokens,
            cost_usd=self.cost_usd + other.cost_usd,
        )

    def went_down_from(self, earlier: "RevisionTotals") -> bool:
        """True when any count is below ``earlier``'s: the counters restarted from zero."""
        if self.latency_buckets and earlier.latency_buckets:
            mine = dict(self.latency_buckets)
            if set(mine) != {bound for bound, _ in earlier.latency_buckets}:
                return True  # another bucket layout: a new process with other bounds
            if any(mine[bound] < count for bound, count in earlier.latency_buckets):
                return True
        return (
            self.invocations < earlier.invocations
            or self.errors < earlier.errors
            or self.tokens < earlier.tokens
            or self.cost_usd < earlier.cost_usd
        )


def window(later: RevisionTotals, earlier: RevisionTotals | None) -> RevisionTotals:
    """What happened between two readings of one source's totals.

    As Prometheus's ``rate()`` reads counters: a total that went down means the counters
    were reset in between, and everything the later reading holds happened since.
    """
    if earlier is None or later.went_down_from(earlier):
        return later
    return RevisionTotals(
        invocations=later.invocations - earlier.invocations,
        errors=later.errors - earlier.errors,
        latency_buckets=_merge_buckets(later.latency_buckets, earlier.latency_buckets, sign=-1),
        tokens=later.tokens - earlier.tokens,
        cost_usd=max(0.0, later.cost_usd - earlier.cost_usd),
    )


def window_by_revision(
    later: Mapping[str, RevisionTotals], earlier: Mapping[str, RevisionTotals]
) -> dict[str, RevisionTotals]:
    """``window`` per revision; a revision absent from ``earlier`` counts from zero."""
    return {revision: window(totals, earlier.get(revision)) for revision, totals in later.items()}


def latency_quantile_s(quantile: float, buckets: tuple[tuple[float, int], ...]) -> float | None:
    """The ``quantile`` (0..1) of a latency histogram, in seconds, as PromQL's
    ``histogram_quantile`` computes it: linear interpolation inside the bucket that holds
    the rank, the first bucket starting at 0, and a rank in the ``+Inf`` bucket answered
    with the highest finite bound. None when the histogram counted nothing.
    """
    if not 0 <= quantile <= 1:
        raise ValueError(f"quantile must be between 0 and 1, got {quantile}")
    ordered = sorted(buckets)
    # Counts read from different moments can dip; Prometheus evens them out the same way.
    counts: list[int] = []
    for _, count in ordered:
        counts.append(max(count, counts[-1]) if counts else count)
    if not counts or counts[-1] == 0:
        return None
    rank = quantile * counts[-1]
    lower, below = 0.0, 0
    for (bound, _), count in zip(ordered, counts, strict=True):
        if count >= rank and count > below:
            if math.isinf(bound):
                return lower  # highest finite bound: nothing is known above it
            if bound <= 0:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


class ResetAwareTotals:
    """Cumulative totals summed over sources whose counters may restart from zero.

    Each source (a router replica, a scraped instance) reports its own cumulative totals
    now and then; a source's total that went down was reset, and what it had counted
    before the reset is kept. So the sum only grows, and the difference of two readings
    is what happened in between, whichever sources restarted meanwhile. A source that
    stops reporting keeps its last totals in the sum: what it counted did happen.
    """

    def __init__(self) -> None:
        self._latest: dict[tuple[str, str], RevisionTotals] = {}
        self._before_resets: dict[tuple[str, str], RevisionTotals] = {}

    def report(self, *, source: str, totals: Mapping[str, RevisionTotals]) -> None:
        """Take one source's current totals by revision."""
        for revision, current in totals.items():
            key = (source, revision)
            previous = self._latest.get(key)
            if previous is not None and current.went_down_from(previous):
                kept = self._before_resets.get(key)
                self._before_resets[key] = previous if kept is None else kept.plus(previous)
            self._latest[key] = current

    def totals(self) -> dict[str, RevisionTotals]:
        """The sum over every source, by revision."""
        summed: dict[str, RevisionTotals] = {}
        for counts in (self._before_resets, self._latest):
            for (_, revision), totals in counts.items():
                known = summed.get(revision)
                summed[revision] = totals if known is None else known.plus(totals)
        return summed


def _merge_buckets(
    left: tuple[tuple[float, int], ...], right: tuple[tuple[float, int], ...], *, sign: int
) -> tuple[tuple[float, int], ...]:
    """Bucket counts added (``sign`` 1) or subtracted (-1) bound by bound."""
    merged = dict(left)
    for bound, count in right:
        merged[bound] = merged.get(bound, 0) + sign * count
    return tuple(sorted((bound, max(0, count)) for bound, count in merged.items()))


class RouterFigures(BaseModel):
    """One router's cumulative totals of one workflow, as it publishes them on the bus."""

    model_config = ConfigDict(frozen=True)

    router: str = Field(
        description="The publishing router instance; its counters start at zero when it starts.",
        examples=["router-7f9c-1234"],
    )
    namespace: str
    name: str
    revisions: dict[str, RevisionTotals] = Field(
        default_factory=dict, description="Totals by revision label since the router started."
    )


class FiguresSource(Protocol):
    """Reads the live totals of one workflow's revisions."""

    async def totals(self, *, namespace: str, name: str) -> Mapping[str, RevisionTotals]:
        """Totals by revision label; a revision that served nothing yet is absent.

        Raises ``FiguresUnavailable`` (a ``PlntError``) for an unreachable source.
        """
        ...
