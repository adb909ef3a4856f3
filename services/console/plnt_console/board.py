"""What the pages show live: the runs (from the ``plnt-runs`` watch) and the routers'
per-revision figures (from ``plnt.figures.router.>``), fanned out to every open page.

Each page holds one queue; a change is put on every queue once (no polling). A page that
falls ``QUEUE_LIMIT`` changes behind is dropped: its browser reconnects and starts again
from a full snapshot. Pure state and arithmetic; the NATS wiring lives in ``app``.
"""

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from plnt_common.figures import RevisionTotals, RouterFigures, latency_quantile_s, window
from plnt_common.projection import RunProjection

QUEUE_LIMIT = 1000
Message = tuple[str, dict[str, Any]]
"""(SSE event name, JSON data)."""


def run_summary(projection: RunProjection) -> dict[str, Any]:
    """One row of the runs page: what a person running a rollout looks at first."""
    status = projection.status.model_dump(mode="json", by_alias=True)
    canary = status.get("canary") or {}
    since = projection.requested_at or projection.phase_since
    return {
        "namespace": projection.namespace,
        "name": projection.name,
        "phase": status.get("phase", ""),
        "revision": status.get("revision", ""),
        "stableRevision": projection.stable_revision,
        "canaryRevision": canary.get("revision", ""),
        "canaryWeight": canary.get("trafficPercent", 0),
        "canaryStep": canary.get("step", ""),
        "message": status.get("message", ""),
        "endpoint": status.get("endpoint", ""),
        "sagaId": projection.saga_id,
        "traceId": status.get("traceId", ""),
        "specDigest": status.get("specDigest", ""),
        "generation": projection.generation,
        "since": since.isoformat() if since else "",
        "deleting": projection.deleting,
    }


@dataclass
class _Reading:
    at: float
    totals: RevisionTotals


@dataclass
class Board:
    """The live state and the pages that follow it."""

    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    figures: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """By ``<namespace>.<name>``, then revision: the latest window's rate and quantiles."""
    _readings: dict[tuple[str, str, str], _Reading] = field(default_factory=dict)
    _pages: set[asyncio.Queue[Message | None]] = field(default_factory=set)

    def follow(self) -> asyncio.Queue[Message | None]:
        """A new page's queue, starting with the whole current state."""
        queue: asyncio.Queue[Message | None] = asyncio.Queue(maxsize=QUEUE_LIMIT + 2)
        queue.put_nowait(("runs", {"runs": sorted(self.runs.values(), key=_order)}))
        queue.put_nowait(("figures", {"figures": self.figures}))
        self._pages.add(queue)
        return queue

    def leave(self, queue: asyncio.Queue[Message | None]) -> None:
        self._pages.discard(queue)

    def close_pages(self) -> None:
        """Ends every page's stream (shutting down: an open stream would hold the server)."""
        for queue in self._pages:
            queue.put_nowait(None)
        self._pages.clear()

    @property
    def pages(self) -> int:
        return len(self._pages)

    def _tell(self, message: Message) -> None:
        for queue in list(self._pages):
            if queue.qsize() >= QUEUE_LIMIT:
                self._pages.discard(queue)
                queue.put_nowait(None)  # the page's stream ends; the browser reconnects
            else:
                queue.put_nowait(message)

    def replace_runs(self, runs: Mapping[str, RunProjection]) -> None:
        self.runs = {key: run_summary(p) for key, p in runs.items() if not p.removed}
        self._tell(("runs", {"runs": sorted(self.runs.values(), key=_order)}))

    def apply_run(self, key: str, projection: RunProjection | None) -> None:
        if projection is None or projection.removed:
            if self.runs.pop(key, None) is not None:
                self._tell(("run-removed", {"key": key}))
            return
        summary = self.runs[key] = run_summary(projection)
        self._tell(("run", summary))

    def add_figures(self, figures: RouterFigures, *, at: float | None = None) -> None:
        """Turns one router's cumulative totals into the window since its last reading."""
        now = datetime.now(UTC).timestamp() if at is None else at
        workflow = f"{figures.namespace}.{figures.name}"
        shown = self.figures.setdefault(workflow, {})
        for revision, totals in figures.revisions.items():
            reading_key = (figures.router, workflow, revision)
            earlier = self._readings.get(reading_key)
            self._readings[reading_key] = _Reading(at=now, totals=totals)
            if earlier is None or now <= earlier.at:
                continue  # the first reading has no window yet
            shown[revision] = window_figures(
                window(totals, earlier.totals), seconds=now - earlier.at, at=now
            )
        self._tell(("figures", {"figures": {workflow: shown}}))


def window_figures(totals: RevisionTotals, *, seconds: float, at: float) -> dict[str, Any]:
    """Calls per second, p50/p95 (ms) and error percent of one window."""
    p50 = latency_quantile_s(0.5, totals.latency_buckets)
    p95 = latency_quantile_s(0.95, totals.latency_buckets)
    return {
        "at": at,
        "rate": totals.invocations / seconds,
        "p50Ms": None if p50 is None else p50 * 1000,
        "p95Ms": None if p95 is None else p95 * 1000,
        "errorPercent": 100.0 * totals.errors / totals.invocations if totals.invocations else 0.0,
        "invocations": totals.invocations,
    }


def sse_frame(message: Message) -> bytes:
    event, data = message
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _order(summary: dict[str, Any]) -> tuple[str, str]:
    return (summary["namespace"], summary["name"])
