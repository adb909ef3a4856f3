"""The step cache: a bounded LRU from a step's cache key to the output it produced.

Keys are built by the executor from (spec digest, step id, canonical JSON of the step
input); this module only stores, evicts and counts. It is not shared across processes and
is only consulted for side-effect-free tools (the LLM-backed ones, never ``http.request``).
Outputs are stored by reference and must be treated as immutable by every reader.
"""

from collections import OrderedDict
from typing import Any

from plnt_common.metrics import STEP_CACHE_REQUESTS

_MISSING = object()


class StepCache:
    """An LRU of at most ``max_entries`` outputs that counts its hits and misses."""

    def __init__(self, *, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError("a StepCache needs room for at least one entry")
        self._max_entries = max_entries
        self._entries: OrderedDict[str, Any] = OrderedDict()
        self.hits = 0
        self.misses = 0
        # Bound children once: labels() per look-up would cost more than the look-up.
        self._hit_counter = STEP_CACHE_REQUESTS.labels(result="hit")
        self._miss_counter = STEP_CACHE_REQUESTS.labels(result="miss")

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def hit_rate(self) -> float:
        """Hits over look-ups since start, 0.0 before the first look-up."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def get(self, key: str) -> tuple[bool, Any]:
        """``(True, output)`` on a hit (and marks it recently used), ``(False, None)`` else."""
        value = self._entries.get(key, _MISSING)
        if value is _MISSING:
            self.misses += 1
            self._miss_counter.inc()
            return False, None
        self._entries.move_to_end(key)
        self.hits += 1
        self._hit_counter.inc()
        return True, value

    def put(self, key: str, value: Any) -> None:
        """Store ``value``, evicting the least recently used entry when full."""
        self._entries[key] = value
        self._entries.move_to_end(key)
        if len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    def stats(self) -> dict[str, float | int]:
        return {
            "entries": len(self._entries),
            "max_entries": self._max_entries,
            "hits": self.hits,
            "misses": self.misses,
            "hit_rate": round(self.hit_rate, 4),
        }
