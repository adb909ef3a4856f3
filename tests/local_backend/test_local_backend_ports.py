"""The port a runner starts on: its last one when nothing listens there, else any free one."""

import socket

from plnt_local_backend.adapters.processes import RUNNER_HOST, pick_free_port


def test_the_preferred_port_is_taken_when_free_and_another_when_something_listens() -> None:
    port = pick_free_port()
    assert pick_free_port(preferred=port) == port

    with socket.socket() as listener:
        listener.bind((RUNNER_HOST, port))
        listener.listen(1)
        other = pick_free_port(preferred=port)
    assert other != port


def test_a_port_held_only_by_closed_connections_counts_as_free() -> None:
    """A runner killed with -9 leaves its accepted connections in TIME_WAIT; its port is
    free for the next runner, which binds with SO_REUSEADDR."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((RUNNER_HOST, 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        with socket.create_connection((RUNNER_HOST, port)) as client:
            accepted, _ = listener.accept()
            accepted.close()  # the server side closes first: TIME_WAIT on the runner's port
            client.recv(1)
    assert pick_free_port(preferred=port) == port
