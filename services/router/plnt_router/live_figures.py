"""The router's cumulative call totals per workflow and revision, read off its metrics.

Calls only increment prometheus-client counters (``metrics.InvocationMetrics``); this
module reads them back, off the hot path, into ``RevisionTotals``: invocations (every
status), errors (5xx statuses), the latency buckets of all of them, prompt plus
completion tokens and cost. Calls the router answered without a workflow or a revision
(unknown workflow, nothing ready, refused before a runner was picked) are left out.

It reads the labelled children ``InvocationMetrics`` caches rather than calling
prometheus-client's ``collect()``: that builds a sample object per bucket and took about
70 ms for 100 workflows, a stall of the event loop every second; reading the children's
values directly, and only for series that counted calls since, costs far less, and the
reading lets calls through every few series. It publishes nothing.
"""

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client import Counter, Histogram

from plnt_common.figures import RevisionTotals
from plnt_router.metrics import InvocationMetrics

Workflow = tuple[str, str]
"""(namespace, name)."""
SERIES_PER_TURN = 50
"""Series read between two turns of the event loop: about 2 ms on a busy machine."""


@dataclass
class _Counts:
    invocations: int = 0
    errors: int = 0
    buckets: dict[float, int] = field(default_factory=lambda: defaultdict(int))
    tokens: int = 0
    cost_usd: float = 0.0

    def totals(self) -> RevisionTotals:
        return RevisionTotals(
            invocations=self.invocations,
            errors=self.errors,
            latency_buckets=tuple(sorted(self.buckets.items())),
            tokens=self.tokens,
            cost_usd=self.cost_usd,
        )


class LiveTotals:
    """Reads ``metrics`` into totals; a series whose call count did not move since the last
    reading is not read again (its buckets cannot have moved: a call observes its latency
    and counts itself in one step of the event loop)."""

    def __init__(self, metrics: InvocationMetrics) -> None:
        self._metrics = metrics
        self._buckets: dict[tuple[str, str, int], tuple[int, list[tuple[float, int]]]] = {}

    async def collect(self) -> dict[Workflow, dict[str, RevisionTotals]]:
        """Every workflow's totals by revision, as the counters hold them now.

        Gives the event loop a turn every ``SERIES_PER_TURN`` series, so calls are never
        held up for the whole reading; each series is read in one piece, and counters only
        grow, so totals read across turns are still totals.
        """
        counts: dict[Workflow, dict[str, _Counts]] = defaultdict(lambda: defaultdict(_Counts))
        calls_series = self._metrics.recorded_calls()
        for index, (workflow, revision, status, histogram, counter) in enumerate(calls_series):
            if index and index % SERIES_PER_TURN == 0:
                await asyncio.sleep(0)
            if (key := _key(workflow, revision)) is None:
                continue
            entry = counts[key[0]][key[1]]
            calls = int(_counter_value(counter))
            entry.invocations += calls
            if 500 <= status <= 599:
                entry.errors += calls
            for bound, cumulative in self._series_buckets(
                (workflow, revision, status), calls, histogram
            ):
                entry.buckets[bound] += cumulative
        for workflow, revision, prompt, completion, cost in self._metrics.recorded_spend():
            if (key := _key(workflow, revision)) is None:
                continue
            entry = counts[key[0]][key[1]]
            entry.tokens += int(_counter_value(prompt) + _counter_value(completion))
            entry.cost_usd += _counter_value(cost)
        return {
            workflow: {revision: entry.totals() for revision, entry in revisions.items()}
            for workflow, revisions in counts.items()
        }

    def _series_buckets(
        self, series: tuple[str, str, int], calls: int, histogram: Histogram
    ) -> list[tuple[float, int]]:
        known = self._buckets.get(series)
        if known is not None and known[0] == calls:
            return known[1]
        buckets = _cumulative_buckets(histogram)
        self._buckets[series] = (calls, buckets)
        return buckets


def _counter_value(counter: Counter) -> float:
    # prometheus-client has no public getter of one child's value; _value is its store.
    return float(counter._value.get())


def _cumulative_buckets(histogram: Histogram) -> list[tuple[float, int]]:
    # A child keeps per-bucket counts beside its bounds; exposition makes them cumulative.
    running = 0
    cumulative = []
    for bound, bucket in zip(histogram._upper_bounds, histogram._buckets, strict=True):
        running += int(bucket.get())
        cumulative.append((float(bound), running))
    return cumulative


def _key(workflow: str, revision: str) -> tuple[Workflow, str] | None:
    """((namespace, name), revision) of a series; None for calls outside any revision."""
    namespace, _, name = workflow.partition("/")
    if not (namespace and name and revision):
        return None
    return (namespace, name), revision
