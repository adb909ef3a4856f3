"""Ports for one stack: never the same port twice, never one that is taken."""

import socket
from collections.abc import Iterator

import pytest

from plnt_cli.supervisor import choose_port
from plnt_common.nats_server import free_ports, port_is_free


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_ports_chosen_together_are_all_different_and_free() -> None:
    ports = free_ports(64)
    assert len(set(ports)) == 64
    assert all(port_is_free(port) for port in ports)


def test_a_free_port_is_chosen_besides_the_ones_already_given(taken_port: int) -> None:
    said: list[str] = []
    nats = choose_port(None, taken_port, "NATS", said.append)
    for _ in range(20):  # a repeat would need the kernel to hand out the same port again
        router = choose_port(None, taken_port, "the router", said.append, chosen_already=(nats,))
        assert router not in (nats, taken_port)
    assert said[0] == f"port {taken_port} is taken, so NATS listens on {nats}"


def test_a_free_default_already_given_to_another_part_is_not_reused() -> None:
    (default,) = free_ports(1)
    chosen = choose_port(None, default, "the router", lambda _: None, chosen_already=(default,))
    assert chosen != default


def test_one_port_asked_for_two_parts_is_refused() -> None:
    (port,) = free_ports(1)
    with pytest.raises(SystemExit, match=f"port {port} for the router is already given"):
        choose_port(port, 8080, "the router", lambda _: None, chosen_already=(port,))


def test_a_requested_port_in_use_is_refused(taken_port: int) -> None:
    with pytest.raises(SystemExit, match=f"port {taken_port} for NATS is already in use"):
        choose_port(taken_port, 4222, "NATS", lambda _: None)
