"""``FiguresSource`` over Prometheus's HTTP API, for clusters that scrape the routers.

Five instant PromQL queries per reading, summed by scrape ``instance`` and revision, over
the routers' series (``workflow="<ns>/<name>"``): ``plnt_invocations_total`` (all, and
5xx), ``plnt_invocation_duration_seconds_bucket`` by ``le``, ``plnt_llm_tokens_total`` and
``plnt_llm_cost_usd_total``. Each instance is a source of ``ResetAwareTotals``, so a
restarted router pod reads as a counter reset, as ``rate()`` reads it, and a pod that is
gone keeps what it counted. It decides nothing about the figures.
"""

import asyncio
import math
from collections import defaultdict
from typing import Any

import aiohttp

from plnt_common.figures import FiguresUnavailable, ResetAwareTotals, RevisionTotals

QUERY_PATH = "/api/v1/query"


class PrometheusFigures:
    """Live totals read from Prometheus at ``url`` (e.g. ``http://prometheus:9090``)."""

    def __init__(self, *, url: str, timeout_s: float = 5.0) -> None:
        self._url = url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._workflows: dict[tuple[str, str], ResetAwareTotals] = {}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def totals(self, *, namespace: str, name: str) -> dict[str, RevisionTotals]:
        """Summed over every scraped router; empty when none served the workflow yet.

        Raises ``FiguresUnavailable`` when Prometheus does not answer a query.
        """
        selector = f'workflow="{namespace}/{name}",revision!=""'
        by = "instance, revision"
        invocations, errors, buckets, tokens, cost = await asyncio.gather(
            self._query(f"sum by ({by}) (plnt_invocations_total{{{selector}}})"),
            self._query(f'sum by ({by}) (plnt_invocations_total{{{selector},status=~"5.."}})'),
            self._query(
                f"sum by ({by}, le) (plnt_invocation_duration_seconds_bucket{{{selector}}})"
            ),
            self._query(f"sum by ({by}) (plnt_llm_tokens_total{{{selector}}})"),
            self._query(f"sum by ({by}) (plnt_llm_cost_usd_total{{{selector}}})"),
        )
        counts: dict[tuple[str, str], dict[str, Any]] = defaultdict(dict)
        for labels, value in invocations:
            counts[_source(labels)]["invocations"] = int(value)
        for labels, value in errors:
            counts[_source(labels)]["errors"] = int(value)
        for labels, value in tokens:
            counts[_source(labels)]["tokens"] = int(value)
        for labels, value in cost:
            counts[_source(labels)]["cost_usd"] = value
        bucket_counts: dict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
        for labels, value in buckets:
            bucket_counts[_source(labels)].append((_bound(labels["le"]), int(value)))
        by_instance: dict[str, dict[str, RevisionTotals]] = defaultdict(dict)
        for (instance, revision), fields in counts.items():
            by_instance[instance][revision] = RevisionTotals(
                **fields,
                latency_buckets=tuple(sorted(bucket_counts.get((instance, revision), []))),
            )
        figures = self._workflows.setdefault((namespace, name), ResetAwareTotals())
        for instance, revisions in by_instance.items():
            figures.report(source=instance, totals=revisions)
        return figures.totals()

    async def _query(self, promql: str) -> list[tuple[dict[str, str], float]]:
        """An instant vector as (labels, value) pairs. Raises ``FiguresUnavailable``."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        try:
            async with self._session.get(
                self._url + QUERY_PATH, params={"query": promql}
            ) as response:
                body = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise FiguresUnavailable(
                f"Prometheus at {self._url} did not answer: {exc or type(exc).__name__}"
            ) from None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else body
            raise FiguresUnavailable(f"Prometheus at {self._url} refused a query: {error}")
        return [(sample["metric"], float(sample["value"][1])) for sample in body["data"]["result"]]


def _source(labels: dict[str, str]) -> tuple[str, str]:
    return labels.get("instance", ""), labels["revision"]


def _bound(le: str) -> float:
    return math.inf if le == "+Inf" else float(le)
