"""The order a reconnect tries servers in: a frozen node (the one just left) last."""

from urllib.parse import urlparse

from nats.aio.client import Server

from plnt_common.bus.connection import ReconnectOrder

A, B, C = "127.0.0.1:4001", "127.0.0.1:4002", "127.0.0.1:4003"


def pool(*netlocs: str) -> list[Server]:
    return [Server(uri=urlparse(f"nats://{netloc}")) for netloc in netlocs]


def picks(order: ReconnectOrder, servers: list[Server], times: int) -> list[tuple[str, float]]:
    chosen = []
    for _ in range(times):
        server, delay = order(servers, {})
        assert server is not None
        chosen.append((server.uri.netloc, delay))
    return chosen


def test_the_server_just_left_is_tried_last_and_only_after_the_wait() -> None:
    order = ReconnectOrder(0.5)
    order.connected(B)
    # nats-py shuffles its pool before a reconnect: B first must not be tried first
    assert picks(order, pool(B, A, C), 4) == [(A, 0.0), (C, 0.0), (B, 0.5), (A, 0.5)]


def test_a_reconnect_starts_afresh_from_the_server_it_reached() -> None:
    order = ReconnectOrder(0.5)
    order.connected(B)
    assert picks(order, pool(A, B, C), 1) == [(A, 0.0)]
    order.connected(A)
    assert picks(order, pool(A, B, C), 3) == [(B, 0.0), (C, 0.0), (A, 0.5)]


def test_a_single_server_is_tried_again_after_the_wait_each_time() -> None:
    order = ReconnectOrder(0.5)
    order.connected(A)
    assert picks(order, pool(A), 3) == [(A, 0.5), (A, 0.5), (A, 0.5)]


def test_no_server_left_to_try_gives_none() -> None:
    assert ReconnectOrder(0.5)([], {}) == (None, 0.0)
