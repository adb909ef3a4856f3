"""Pure parts of serving failover: the endpoint split and the endpoint health book."""

from plnt_router.endpoint_health import MIN_RAMP_WEIGHT, EndpointHealth
from plnt_router.logic import EndpointSplit

A, B, C = "http://a:1", "http://b:1", "http://c:1"


def picks(split: EndpointSplit, weighted: list[tuple[str, float]], n: int) -> list[str]:
    return [weighted[split.pick(weighted)][0] for _ in range(n)]


def test_equal_endpoints_alternate_and_weights_give_exact_interleaved_shares() -> None:
    assert picks(EndpointSplit(), [(A, 1.0), (B, 1.0)], 6) == [A, B, A, B, A, B]
    quarter = picks(EndpointSplit(), [(A, 1.0), (B, 3.0)], 8)
    assert quarter.count(A) == 2
    assert quarter[:4].count(A) == 1, "the light endpoint's calls are spread, not bunched"


def test_an_endpoint_leaving_the_split_gives_its_calls_to_the_others() -> None:
    split = EndpointSplit()
    picks(split, [(A, 1.0), (B, 1.0), (C, 1.0)], 4)
    assert set(picks(split, [(A, 1.0), (C, 1.0)], 10)) == {A, C}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_failures_in_a_row_take_an_endpoint_out_and_an_answer_resets_the_count() -> None:
    changes: list[str] = []
    health = EndpointHealth(down_after=2, ramp_s=10, on_change=lambda: changes.append("x"))
    health.failed(A)
    health.answered(A)
    health.failed(A)
    assert health.weight(A) == 1.0 and health.is_up(A)
    health.failed(A)
    assert health.weight(A) == 0.0
    assert health.down() == [A]
    assert changes == ["x"]
    assert health.weight(B) == 1.0


def test_a_recovered_endpoint_ramps_from_a_trickle_to_its_whole_share() -> None:
    clock = Clock()
    health = EndpointHealth(down_after=1, ramp_s=10, clock=clock)
    health.failed(A)
    health.recovered(A)
    assert health.down() == []
    assert health.weight(A) == MIN_RAMP_WEIGHT
    clock.now += 5
    assert health.weight(A) == 0.5
    clock.now += 5
    assert health.weight(A) == 1.0


def test_an_answer_from_a_down_endpoint_brings_it_back_on_the_ramp() -> None:
    clock = Clock()
    health = EndpointHealth(down_after=1, ramp_s=10, clock=clock)
    health.failed(A)
    health.answered(A)
    assert health.is_up(A)
    assert health.weight(A) == MIN_RAMP_WEIGHT


def test_health_of_endpoints_no_route_lists_is_forgotten() -> None:
    health = EndpointHealth(down_after=1, ramp_s=10)
    health.failed(A)
    health.failed(B)
    health.forget_except([B])
    assert health.down() == [B]


def test_two_failed_probes_in_a_row_take_an_up_endpoint_out_and_an_answer_resets_them() -> None:
    health = EndpointHealth(down_after=1, ramp_s=10)
    health.probe_failed(A)
    health.probe_answered(A)
    health.probe_failed(A)
    assert health.is_up(A), "one failed probe after an answer is not two in a row"
    health.probe_failed(A)
    assert not health.is_up(A) and health.down() == [A]
    health.recovered(A)
    health.probe_failed(A)
    assert health.is_up(A), "a return starts the probe count over"
