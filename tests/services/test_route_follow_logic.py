"""Pure decisions of routes following what serves: the promoter's ``followed``, the
watcher's ``Serving`` condition, and the local-backend's preferred port."""

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from plnt_common.releases import ObservedRelease, ReleasePhase
from plnt_common.routes import RouteEntry, RouteTarget
from plnt_common.tasks import cancelled
from plnt_local_backend.logic import preferred_port
from plnt_promoter.logic import followed
from plnt_watcher.serving import Serving, ServingLoop, serving_of, with_serving

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
OLD = "http://127.0.0.1:40001"
NEW = "http://127.0.0.1:40002"


def target(revision: str = "1.0.0-g1", *, url: str = OLD, **fields: object) -> RouteTarget:
    return RouteTarget(revision=revision, url=url, saga_id="default.shop.1.1", **fields)


def seen(
    phase: ReleasePhase,
    *,
    url: str = NEW,
    revision: str = "1.0.0-g1",
    release: str = "default-shop-g1",
) -> ObservedRelease:
    return ObservedRelease(
        namespace="default",
        release=release,
        revision=revision,
        saga_id="default.shop.1.1",
        phase=phase,
        url=url,
        message="exited with signal 9",
    )


def entry(
    stable: RouteTarget | None, canary: RouteTarget | None = None, weight: int = 0
) -> RouteEntry:
    return RouteEntry(
        namespace="default", name="shop", stable=stable, canary=canary, canary_weight=weight
    )


def test_a_ready_runner_at_a_new_address_moves_the_target_there() -> None:
    moved = followed(entry(target()), {"default-shop-g1": seen(ReleasePhase.READY)}, now=NOW)
    assert moved.stable == target(url=NEW, release="default-shop-g1")


def test_a_restarting_runner_marks_the_target_not_serving_and_keeps_its_address() -> None:
    down = followed(
        entry(target()), {"default-shop-g1": seen(ReleasePhase.STARTING, url="")}, now=NOW
    )
    assert down.stable is not None
    assert (down.stable.url, down.stable.serving, down.stable.reason) == (
        OLD,
        False,
        "RunnerStarting",
    )
    assert (down.stable.since, down.stable.message) == (NOW, "exited with signal 9")


def test_a_failed_runner_is_reported_as_failed() -> None:
    down = followed(entry(target()), {"default-shop-g1": seen(ReleasePhase.FAILED)}, now=NOW)
    assert down.stable is not None and down.stable.reason == "RunnerFailed"


def test_a_backend_reason_is_kept() -> None:
    observed = seen(ReleasePhase.STARTING).model_copy(update={"reason": "NoReadyPods"})
    down = followed(entry(target()), {"default-shop-g1": observed}, now=NOW)
    assert down.stable is not None and down.stable.reason == "NoReadyPods"


@pytest.mark.parametrize(
    "observed",
    [{}, {"default-shop-g1": seen(ReleasePhase.STARTING, revision="0.9.0-g1")}],
    ids=["nothing-observed", "another-revision"],
)
def test_no_news_of_the_release_leaves_the_route_as_it_is(
    observed: dict[str, ObservedRelease],
) -> None:
    route = entry(target())
    assert followed(route, observed, now=NOW) is route


def test_an_unchanged_observation_changes_nothing_not_even_the_time() -> None:
    route = followed(entry(target()), {"default-shop-g1": seen(ReleasePhase.READY)}, now=NOW)
    later = datetime(2026, 12, 1, 11, 0, tzinfo=UTC)
    assert followed(route, {"default-shop-g1": seen(ReleasePhase.READY)}, now=later) == route


def test_stable_and_canary_follow_their_own_releases() -> None:
    route = entry(target(), target("1.1.0-g2", release="shop-g2"), weight=10)
    observed = {
        "default-shop-g1": seen(ReleasePhase.READY),
        "shop-g2": seen(ReleasePhase.STARTING, revision="1.1.0-g2", release="shop-g2"),
    }
    result = followed(route, observed, now=NOW)
    assert result.stable is not None and result.stable.url == NEW and result.stable.serving
    assert result.canary is not None and not result.canary.serving


def test_serving_is_true_when_every_routed_runner_serves() -> None:
    serving = serving_of(entry(target(since=NOW)))
    assert serving == Serving(
        ok=True, reason="RunnerReady", message=f"1.0.0-g1 at {OLD}", since=NOW
    )


def test_serving_names_the_routed_runner_that_is_down() -> None:
    down = target("1.1.0-g2", serving=False, reason="RunnerStarting", message="exited", since=NOW)
    serving = serving_of(entry(target(), down, weight=10))
    assert serving is not None and not serving.ok
    assert serving.message == "canary 1.1.0-g2 is not serving: exited"


def test_a_canary_taking_no_traffic_does_not_decide_serving() -> None:
    down = target("1.1.0-g2", serving=False, reason="RunnerStarting")
    serving = serving_of(entry(target(), down, weight=0))
    assert serving is not None and serving.ok


def test_no_route_or_nothing_routed_gives_no_condition() -> None:
    assert serving_of(None) is None
    assert serving_of(entry(None, target(), weight=0)) is None


def test_the_condition_replaces_an_older_one_and_dates_from_ready_until_it_changes() -> None:
    ready = {"type": "Ready", "status": "True", "reason": "Succeeded", "lastTransitionTime": "T1"}
    stale = {"type": "Serving", "status": "False", "reason": "x", "lastTransitionTime": "T0"}
    status = {"phase": "Ready", "observedGeneration": 2, "conditions": [ready, stale]}

    merged = with_serving(status, Serving(ok=True, reason="RunnerReady", message="", since=None))

    assert merged["conditions"] == [
        ready,
        {
            "type": "Serving",
            "status": "True",
            "reason": "RunnerReady",
            "message": "",
            "lastTransitionTime": "T1",
            "observedGeneration": 2,
        },
    ]
    assert with_serving(status, None)["conditions"] == [ready]


@pytest.mark.parametrize(
    ("last_url", "failures", "expected"),
    [
        ("http://127.0.0.1:40001", 0, 40001),
        ("http://127.0.0.1:40001", 1, 40001),
        ("http://127.0.0.1:40001", 2, None),
        ("", 0, None),
        ("http://127.0.0.1", 0, None),
    ],
    ids=["first-start", "after-one-exit", "crash-loop", "no-earlier-runner", "no-port"],
)
def test_a_runner_starts_again_on_its_last_port_unless_that_failed(
    last_url: str, failures: int, expected: int | None
) -> None:
    assert preferred_port(last_url=last_url, failures_in_a_row=failures) == expected


async def test_a_serving_change_whose_status_write_failed_is_written_again() -> None:
    attempts: list[tuple[str, str]] = []
    written = asyncio.Event()

    async def refresh(namespace: str, name: str) -> None:
        attempts.append((namespace, name))
        if len(attempts) == 1:
            raise ConnectionError("NATS away")
        written.set()

    async def feed() -> AsyncIterator[tuple[str, RouteEntry | None]]:
        yield "default.shop", entry(target())
        await asyncio.Event().wait()  # a watch that stays open

    loop = ServingLoop(feed=feed, retry_s=0.05)
    stop = asyncio.Event()
    running = asyncio.create_task(loop.run(stop, refresh=refresh))
    await asyncio.wait_for(written.wait(), timeout=5)
    stop.set()
    await cancelled(running)

    assert attempts == [("default", "shop"), ("default", "shop")]
    serving = loop.lookup("default", "shop")
    assert serving is not None and serving.ok


def test_calls_see_only_serving_targets() -> None:
    canary = target("1.1.0-g2")
    down_canary = entry(target(), canary.model_copy(update={"serving": False}), weight=10)
    assert down_canary.serving_only() == entry(target(), None, weight=0)

    down_stable = entry(target(serving=False), canary, weight=10)
    assert down_stable.serving_only() == entry(None, canary, weight=10)

    both_down = entry(target(serving=False), None)
    assert not both_down.serving_only().has_ready_target()

    serving = entry(target(), canary, weight=10)
    assert serving.serving_only() is serving


def test_a_runner_up_again_clears_the_reason_and_message_it_was_down_for() -> None:
    down = target(serving=False, reason="RunnerStarting", message="exited with signal 9")
    up = followed(entry(down), {"default-shop-g1": seen(ReleasePhase.READY)}, now=NOW)
    assert up.stable is not None
    assert (up.stable.serving, up.stable.reason, up.stable.message) == (True, "", "")


def test_a_canary_without_its_release_is_found_by_the_runs_name_and_dated_when_it_serves() -> None:
    canary = target("1.1.0-g2", serving=False)  # no release: default-shop-g2, from the run's name
    route = entry(target(), canary, weight=10)
    observed = {
        "default-shop-g2": seen(ReleasePhase.READY, revision="1.1.0-g2", release="default-shop-g2")
    }
    result = followed(route, observed, now=NOW)
    assert result.canary is not None
    assert (result.canary.url, result.canary.serving, result.canary.since) == (NEW, True, NOW)
