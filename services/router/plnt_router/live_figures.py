"""The router's cumulative call totals per workflow and revision, read off its metrics.

Calls only increment prometheus-client counters (``metrics``); this module reads them
back, off the hot path, into ``RevisionTotals``: invocations (every status), errors (5xx
statuses), the latency buckets of all of them, prompt plus completion tokens and cost.
Calls the router answered without a workflow or a revision (unknown workflow, nothing
ready, refused before a runner was picked) are left out. It publishes nothing.
"""

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client import Metric

from plnt_common.figures import RevisionTotals
from plnt_common.metrics import INVOCATION_DURATION, INVOCATIONS, LLM_COST, LLM_TOKENS

Workflow = tuple[str, str]
"""(namespace, name)."""


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


def collect_totals() -> dict[Workflow, dict[str, RevisionTotals]]:
    """Every workflow's totals by revision, as this process's counters hold them now."""
    counts: dict[Workflow, dict[str, _Counts]] = defaultdict(lambda: defaultdict(_Counts))
    for sample_name, labels, value in _samples(INVOCATIONS.collect()):
        if sample_name == "plnt_invocations_total" and (key := _key(labels)):
            entry = counts[key[0]][key[1]]
            entry.invocations += int(value)
            if labels.get("status", "").startswith("5"):
                entry.errors += int(value)
    for sample_name, labels, value in _samples(INVOCATION_DURATION.collect()):
        if sample_name == "plnt_invocation_duration_seconds_bucket" and (key := _key(labels)):
            bound = math.inf if labels["le"] == "+Inf" else float(labels["le"])
            counts[key[0]][key[1]].buckets[bound] += int(value)
    for sample_name, labels, value in _samples(LLM_TOKENS.collect()):
        if sample_name == "plnt_llm_tokens_total" and (key := _key(labels)):
            counts[key[0]][key[1]].tokens += int(value)
    for sample_name, labels, value in _samples(LLM_COST.collect()):
        if sample_name == "plnt_llm_cost_usd_total" and (key := _key(labels)):
            counts[key[0]][key[1]].cost_usd += value
    return {
        workflow: {revision: entry.totals() for revision, entry in revisions.items()}
        for workflow, revisions in counts.items()
    }


def _samples(families: Iterable[Metric]) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, s.labels, s.value) for family in families for s in family.samples]


def _key(labels: dict[str, str]) -> tuple[Workflow, str] | None:
    """((namespace, name), revision) of a sample; None for calls outside any revision."""
    namespace, _, name = labels.get("workflow", "").partition("/")
    revision = labels.get("revision", "")
    if not (namespace and name and revision):
        return None
    return (namespace, name), revision
