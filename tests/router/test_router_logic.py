"""Pure routing decisions: the weighted split, readiness edge cases, the connect fallback."""

import itertools

import pytest

from plnt_common.routes import RouteEntry, RouteTarget
from plnt_router.logic import CanarySplit, choose_target, fallback_target
from plnt_router.table import RouteTable

STABLE = RouteTarget(revision="1.0.0-g1", url="http://127.0.0.1:1001")
CANARY = RouteTarget(revision="1.1.0-g2", url="http://127.0.0.1:1002")


def entry(
    *, stable: RouteTarget | None = STABLE, canary: RouteTarget | None = CANARY, weight: int = 0
) -> RouteEntry:
    return RouteEntry(
        namespace="default", name="echo", stable=stable, canary=canary, canary_weight=weight
    )


@pytest.mark.parametrize("weight", [0, 5, 50, 100], ids=lambda w: f"canary-{w}pct")
def test_split_over_10000_calls_is_within_one_point_of_the_weight(weight: int) -> None:
    split = CanarySplit()
    route = entry(weight=weight)
    canary_calls = 0
    for n in range(1, 10_001):
        target = choose_target(entry=route, split=split)
        assert target in (STABLE, CANARY)
        canary_calls += target == CANARY
        # Stronger than the 1-point budget: at every prefix the count is the nearest integer.
        assert abs(canary_calls - n * weight / 100) <= 0.5
    assert abs(canary_calls / 100 - weight) <= 1.0


def test_split_spreads_canary_calls_evenly_instead_of_bunching_them() -> None:
    split = CanarySplit()
    picks = [split.next_is_canary(weight=25) for _ in range(100)]
    positions = [i for i, canary in enumerate(picks) if canary]
    assert len(positions) == 25
    assert {b - a for a, b in itertools.pairwise(positions)} == {4}


def test_split_honours_a_weight_change_from_the_next_call_on() -> None:
    split = CanarySplit()
    route = entry(weight=10)
    first = sum(choose_target(entry=route, split=split) == CANARY for _ in range(1000))
    route = entry(weight=90)
    second = sum(choose_target(entry=route, split=split) == CANARY for _ in range(1000))
    assert (first, second) == (100, 900)


@pytest.mark.parametrize(
    ("route", "expected"),
    [
        (entry(stable=None, weight=30), CANARY),
        (entry(stable=None, weight=0), None),
        (entry(stable=None, canary=None), None),
        (entry(canary=None, weight=40), STABLE),
        (entry(weight=0), STABLE),
        (entry(weight=100), CANARY),
    ],
    ids=[
        "no-stable-canary-weighted-gets-everything",
        "no-stable-canary-at-zero-is-nothing-ready",
        "no-targets-is-nothing-ready",
        "no-canary-stable-gets-everything",
        "canary-at-zero-gets-nothing",
        "canary-at-100-gets-everything",
    ],
)
def test_choose_target_edge_cases(route: RouteEntry, expected: RouteTarget | None) -> None:
    split = CanarySplit()
    assert {choose_target(entry=route, split=split) for _ in range(50)} == {expected}
    assert route.has_ready_target() is (expected is not None)


@pytest.mark.parametrize(
    ("route", "failed", "expected"),
    [
        (entry(weight=20), STABLE, CANARY),
        (entry(weight=20), CANARY, STABLE),
        (entry(weight=0), STABLE, None),
        (entry(canary=None), STABLE, None),
        (entry(canary=STABLE.model_copy(update={"revision": "x"}), weight=50), STABLE, None),
    ],
    ids=[
        "stable-refused-try-canary",
        "canary-refused-try-stable",
        "canary-at-zero-is-not-a-fallback",
        "no-other-target",
        "same-url-is-not-a-fallback",
    ],
)
def test_fallback_target(
    route: RouteEntry, failed: RouteTarget, expected: RouteTarget | None
) -> None:
    assert fallback_target(entry=route, failed=failed) == expected


def test_route_table_keeps_the_split_state_when_an_entry_is_updated() -> None:
    table = RouteTable()
    table.put(key="default.echo", entry=entry(weight=50))
    route = table.get("default.echo")
    assert route is not None
    assert [route.pick() for _ in range(3)] == [CANARY, STABLE, CANARY]
    table.put(key="default.echo", entry=entry(weight=50))
    # Same Route object, same counter: the alternation continues instead of restarting.
    assert table.get("default.echo") is route
    assert route.pick() == STABLE


def test_route_table_replace_all_drops_keys_missing_from_the_new_state() -> None:
    table = RouteTable()
    assert not table.loaded
    table.put(key="default.a", entry=entry())
    table.put(key="default.b", entry=entry())
    table.replace_all({"default.b": entry(weight=10), "default.c": entry()})
    assert table.loaded
    assert table.get("default.a") is None
    b = table.get("default.b")
    assert b is not None
    assert b.entry.canary_weight == 10
    assert table.get("default.c") is not None


def test_a_one_percent_canary_gets_one_call_in_a_hundred() -> None:
    split = CanarySplit()
    served = [choose_target(entry=entry(weight=1), split=split) for _ in range(100)]
    assert served.count(CANARY) == 1


@pytest.mark.parametrize(
    ("route", "failed", "expected"),
    [
        (entry(weight=1), STABLE, CANARY),
        (entry(stable=None, weight=50), STABLE.model_copy(update={"url": "http://gone"}), CANARY),
    ],
    ids=["a-one-percent-canary-is-a-fallback", "no-stable-the-canary-is-the-fallback"],
)
def test_a_canary_with_any_share_is_a_fallback(
    route: RouteEntry, failed: RouteTarget, expected: RouteTarget
) -> None:
    assert fallback_target(entry=route, failed=failed) == expected
