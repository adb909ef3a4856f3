"""The pure arithmetic of live figures: windows with counter resets, summing restarting
sources, and quantiles from histogram buckets the way PromQL computes them."""

import math

import pytest

from plnt_common.figures import (
    ResetAwareTotals,
    RevisionTotals,
    latency_quantile_s,
    window,
    window_by_revision,
)

INF = math.inf


def totals(invocations: int, *, errors: int = 0, tokens: int = 0, cost: float = 0.0,
           buckets: tuple[tuple[float, int], ...] = ()) -> RevisionTotals:  # fmt: skip
    return RevisionTotals(
        invocations=invocations,
        errors=errors,
        tokens=tokens,
        cost_usd=cost,
        latency_buckets=buckets,
    )


def test_a_window_is_the_difference_of_two_readings_field_by_field() -> None:
    earlier = totals(10, errors=1, tokens=100, cost=0.5, buckets=((1.0, 8), (INF, 10)))
    later = totals(25, errors=3, tokens=400, cost=1.25, buckets=((1.0, 20), (INF, 25)))
    assert window(later, earlier) == totals(
        15, errors=2, tokens=300, cost=0.75, buckets=((1.0, 12), (INF, 15))
    )


@pytest.mark.parametrize(
    "later",
    [
        totals(3, buckets=((1.0, 3), (INF, 3))),
        totals(12, errors=0, buckets=((1.0, 12), (INF, 12))),
        totals(12, errors=1, tokens=5, buckets=((1.0, 12), (INF, 12))),
        totals(12, errors=1, buckets=((0.5, 12), (INF, 12))),
    ],
    ids=["invocations-went-down", "errors-went-down", "tokens-went-down", "other-bucket-layout"],
)
def test_a_total_that_went_down_is_a_reset_so_the_later_reading_is_the_whole_window(
    later: RevisionTotals,
) -> None:
    earlier = totals(10, errors=1, tokens=50, buckets=((1.0, 10), (INF, 10)))
    assert window(later, earlier) == later


def test_a_revision_first_seen_in_the_later_reading_counts_from_zero() -> None:
    later = {"r1": totals(5), "r2": totals(2)}
    assert window_by_revision(later, {"r1": totals(4)}) == {"r1": totals(1), "r2": totals(2)}


def test_sources_are_summed_and_a_source_that_restarted_keeps_what_it_counted_before() -> None:
    figures = ResetAwareTotals()
    figures.report(source="router-a", totals={"r1": totals(10, tokens=100)})
    figures.report(source="router-b", totals={"r1": totals(5, tokens=50), "r2": totals(1)})
    assert figures.totals() == {"r1": totals(15, tokens=150), "r2": totals(1)}
    # router-a restarted: its counters began again at zero and have counted 2 calls since.
    figures.report(source="router-a", totals={"r1": totals(2, tokens=20)})
    assert figures.totals()["r1"] == totals(17, tokens=170)
    figures.report(source="router-a", totals={"r1": totals(4, tokens=40)})
    assert figures.totals()["r1"] == totals(19, tokens=190)


def test_a_source_that_stopped_reporting_stays_in_the_sum() -> None:
    figures = ResetAwareTotals()
    figures.report(source="gone", totals={"r1": totals(7)})
    figures.report(source="alive", totals={"r1": totals(1)})
    figures.report(source="alive", totals={"r1": totals(3)})
    assert figures.totals() == {"r1": totals(10)}


# Buckets of 100 calls: 50 under 1 s, 90 under 2 s, 95 under 3 s, all under 5 s.
HUNDRED = ((0.5, 0), (1.0, 50), (2.0, 90), (3.0, 95), (5.0, 100), (INF, 100))


@pytest.mark.parametrize(
    ("quantile", "buckets", "expected"),
    [
        (0.5, HUNDRED, 1.0),
        (0.95, HUNDRED, 3.0),
        (0.9, HUNDRED, 2.0),
        (0.7, HUNDRED, 1.5),  # rank 70 of the 50..90 bucket [1, 2): halfway
        (0.25, HUNDRED, 0.75),  # rank 25 of the 0..50 bucket (0.5, 1]: halfway
        (0.1, ((1.0, 10), (INF, 10)), 0.1),  # the first bucket starts at 0
        (0.99, ((1.0, 5), (2.5, 5), (INF, 10)), 2.5),  # in +Inf: the highest finite bound
        (0.95, ((1.0, 10), (2.0, 9), (INF, 10)), 0.95),  # a dipping count is evened out
    ],
    ids=["p50", "p95", "p90", "interpolated", "interpolated-low", "first-bucket", "inf", "dip"],
)
def test_quantiles_interpolate_inside_buckets_as_histogram_quantile_does(
    quantile: float, buckets: tuple[tuple[float, int], ...], expected: float
) -> None:
    assert latency_quantile_s(quantile, buckets) == pytest.approx(expected)


def test_a_histogram_that_counted_nothing_has_no_quantile() -> None:
    assert latency_quantile_s(0.95, ((1.0, 0), (INF, 0))) is None
    assert latency_quantile_s(0.95, ()) is None


def test_a_quantile_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        latency_quantile_s(95, HUNDRED)
