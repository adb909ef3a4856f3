"""The route model's per-backend endpoints: additive; a target with only ``url`` is as before."""

from plnt_common.routes import BackendEndpoint, RouteEntry, RouteTarget


def test_a_target_with_only_url_reads_and_serves_as_before() -> None:
    legacy = {"revision": "1.0.0-g1", "url": "http://127.0.0.1:1001"}
    target = RouteTarget.model_validate(legacy)
    assert target.endpoints == []
    assert target.serving_endpoints() == [BackendEndpoint(backend="", url="http://127.0.0.1:1001")]
    entry = RouteEntry(namespace="default", name="echo", stable=target)
    assert entry.serving_only() is entry


def test_endpoints_round_trip_through_json_and_only_serving_ones_take_calls() -> None:
    target = RouteTarget(
        revision="1.0.0-g1",
        url="http://east:1",
        endpoints=[
            BackendEndpoint(backend="gpu-east", url="http://east:1"),
            BackendEndpoint(backend="gpu-west", url="http://west:1", serving=False),
        ],
    )
    again = RouteTarget.model_validate_json(target.model_dump_json())
    assert again == target
    assert [e.backend for e in again.serving_endpoints()] == ["gpu-east"]


def test_a_target_down_on_every_backend_it_lists_is_left_out() -> None:
    down = RouteTarget(
        revision="1.0.0-g1",
        url="http://east:1",
        endpoints=[BackendEndpoint(backend="gpu-east", url="http://east:1", serving=False)],
    )
    canary = RouteTarget(revision="1.1.0-g2", url="http://east:2")
    entry = RouteEntry(namespace="d", name="e", stable=down, canary=canary, canary_weight=10)
    seen = entry.serving_only()
    assert seen.stable is None
    assert seen.canary == canary


def test_a_target_with_endpoints_stays_hashable_and_equal_targets_hash_alike() -> None:
    def make() -> RouteTarget:
        endpoint = BackendEndpoint(backend="gpu-east", url="http://east:1")
        return RouteTarget(revision="r", url="http://east:1", endpoints=[endpoint])

    assert {make(), make()} == {make()}
