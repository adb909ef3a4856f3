"""Exponential backoff with jitter, shaped like client-go's per-item rate limiter.

Delays double from ``base_s`` to ``cap_s``; each is jittered down by up to ``jitter``
of itself so that retries of many objects after one outage do not arrive together.
"""

import random
from dataclasses import dataclass

from prometheus_client import Counter, Gauge

STATUS_RETRIES = Counter(
    "plnt_watcher_status_retries_total",
    "Status writes of a WorkflowRun the API server refused retryably (5xx, 429, timeouts, "
    "connection refused) and the watcher retried.",
)
QUEUE_DEPTH = Gauge(
    "plnt_watcher_queue_depth",
    "WorkflowRuns whose handling failed and waits for its retry (the per-object work queue).",
)


@dataclass(frozen=True)
class Backoff:
    base_s: float = 0.8
    cap_s: float = 30.0
    jitter: float = 0.2

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th consecutive failure (1 for the first)."""
        full = min(self.cap_s, self.base_s * 2.0 ** max(0, failures - 1))
        return float(full * (1.0 - self.jitter * random.random()))
