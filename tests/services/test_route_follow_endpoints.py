"""A revision placed on several backends (``spec.placement.spread``): its route target lists
one endpoint per backend, and the promoter's follower keeps each at its own release's
observed address and readiness, the target serving while any of them does."""

from test_route_follow_logic import NEW, NOW, OLD, entry, seen

from plnt_common.events import CanaryRef, SpreadRelease
from plnt_common.releases import ReleasePhase
from plnt_common.routes import BackendEndpoint, RouteTarget
from plnt_promoter.logic import followed, stepped_back, target
from plnt_watcher.serving import serving_of, with_serving

EAST, WEST = "default-shop-g1", "default-shop-g1-west"


def spread_target() -> RouteTarget:
    canary = CanaryRef(
        revision="1.0.0-g1",
        release=EAST,
        url=OLD,
        backend="east",
        spread=(SpreadRelease(backend="west", release=WEST, url=OLD + "9"),),
    )
    return target(canary, "default.shop.1.1")


def test_the_saga_s_target_lists_every_backend_in_placement_order() -> None:
    assert spread_target().endpoints == [
        BackendEndpoint(backend="east", url=OLD, release=EAST),
        BackendEndpoint(backend="west", url=OLD + "9", release=WEST),
    ]


def test_a_canary_on_one_backend_lists_no_endpoints() -> None:
    canary = CanaryRef(revision="1.0.0-g1", release=EAST, url=OLD, backend="east")
    assert target(canary, "default.shop.1.1").endpoints == []


def test_a_runner_down_on_one_backend_takes_out_that_endpoint_only() -> None:
    before = entry(spread_target())
    observed = {
        EAST: seen(ReleasePhase.READY, url=OLD, release=EAST),
        WEST: seen(ReleasePhase.FAILED, url="", release=WEST),
    }

    after = followed(before, observed, now=NOW)

    assert after.stable is not None
    assert [(e.backend, e.serving, e.reason) for e in after.stable.endpoints] == [
        ("east", True, ""),
        ("west", False, "RunnerFailed"),
    ]
    assert after.stable.serving and after.stable.url == OLD
    assert stepped_back(before, after) == [WEST]


def test_the_target_is_down_only_when_every_backend_is() -> None:
    observed = {
        EAST: seen(ReleasePhase.STARTING, url="", release=EAST),
        WEST: seen(ReleasePhase.FAILED, url="", release=WEST),
    }

    after = followed(entry(spread_target()), observed, now=NOW)

    assert after.stable is not None
    assert (after.stable.serving, after.stable.reason, after.stable.since) == (
        False,
        "RunnerStarting",
        NOW,
    )
    assert after.serving_only().stable is None


def test_a_restarted_runner_moves_its_own_endpoint_and_the_first_moves_the_url() -> None:
    observed = {
        EAST: seen(ReleasePhase.READY, url=NEW, release=EAST),
        WEST: seen(ReleasePhase.READY, url=NEW + "9", release=WEST),
    }

    after = followed(entry(spread_target()), observed, now=NOW)

    assert after.stable is not None
    assert [e.url for e in after.stable.endpoints] == [NEW, NEW + "9"]
    assert after.stable.url == NEW


def test_a_backend_that_reports_nothing_keeps_its_endpoint() -> None:
    before = entry(spread_target())
    assert followed(before, {}, now=NOW) == before


def test_a_backend_whose_copy_is_down_is_lost_in_the_placement_and_the_run_still_serves() -> None:
    observed = {
        EAST: seen(ReleasePhase.FAILED, url="", release=EAST),
        WEST: seen(ReleasePhase.READY, url=NEW, release=WEST),
    }
    route = followed(entry(spread_target()), observed, now=NOW)
    status = {
        "phase": "Ready",
        "placement": [
            {"backend": "east", "state": "Serving", "replicas": 1},
            {"backend": "west", "state": "Serving", "replicas": 1},
            {"backend": "burst", "state": "Skipped", "reason": "NoCapacity: full"},
        ],
    }

    serving = serving_of(route)
    written = with_serving(status, serving)

    assert serving is not None and serving.ok
    assert serving.message == f"1.0.0-g1 at {NEW}; lost: east (RunnerFailed)"
    assert written["placement"] == [
        {
            "backend": "east",
            "state": "Lost",
            "replicas": 1,
            "reason": "RunnerFailed: its calls go to the other backends",
        },
        status["placement"][1],
        status["placement"][2],
    ]


def test_the_backend_returning_makes_it_serving_again() -> None:
    observed = {
        EAST: seen(ReleasePhase.READY, url=OLD, release=EAST),
        WEST: seen(ReleasePhase.READY, url=NEW, release=WEST),
    }
    placement = [{"backend": "east", "state": "Serving"}, {"backend": "west", "state": "Serving"}]

    written = with_serving(
        {"placement": placement}, serving_of(followed(entry(spread_target()), observed, now=NOW))
    )

    assert written["placement"] == placement
