"""Percentiles for benchmark samples."""

import math


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def summary_ms(samples_s: list[float]) -> tuple[float, float]:
    """(p50, p99) in milliseconds."""
    return percentile(samples_s, 0.5) * 1000, percentile(samples_s, 0.99) * 1000
