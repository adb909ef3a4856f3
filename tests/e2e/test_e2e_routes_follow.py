"""Routes follow what serves, on the real embedded stack: a runner killed with -9, the
local-backend killed with -9, and ``plnt up`` restarted on the same data dir all serve
again within seconds, without a re-apply; the run's ``Serving`` condition says so."""

import asyncio
import contextlib
import json
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from stack_fixtures import start_stack
from stack_support import (
    BACKEND,
    Client,
    backend_document,
    invoke,
    publish_spec,
    run_document,
    workflow_named,
)

from plnt_cli import render
from plnt_cli.supervisor import Supervisor
from plnt_common.bus.bus import Bus
from plnt_common.releases import release_name
from plnt_common.routes import RouteEntry

BACK_WITHIN_S = 15.0
"""A runner restarts after a 1 s back-off and starts in about a second; slack for CI."""


def serving_condition(status: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or () if c["type"] == "Serving"), None)


async def route_of(client: Client, name: str) -> RouteEntry:
    entry = await client.bus.routes.get(f"default.{name}")
    return RouteEntry.model_validate_json(entry.value or b"")


async def observed_pid(client: Client, name: str) -> int:
    entry = await client.bus.releases.get(f"observed.default.{release_name('default', name, 1)}")
    return int(json.loads(entry.value or b"{}")["pid"])


@contextlib.contextmanager
def port_taken(port: int) -> Iterator[None]:
    """Something else listens on ``port`` (and never answers): a runner cannot come back
    there, so its route has to move."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT
        sock.bind(("127.0.0.1", port))
        sock.listen(8)
        yield


async def invokes_again(endpoint: str, *, within_s: float) -> float:
    """Seconds until an invoke answers 200 from revision 1.0.0-g1."""
    started = time.monotonic()
    last: tuple[int, str] = (0, "")
    while time.monotonic() - started < within_s:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2):
                code, revision, _ = await invoke(endpoint, {"review": "fine"})
            last = (code, revision)
            if last == (200, "1.0.0-g1"):
                return time.monotonic() - started
        await asyncio.sleep(0.1)
    raise AssertionError(f"no 200 within {within_s}s; last answer {last}")


async def deploy(client: Client, registry: Path, name: str) -> str:
    publish_spec(registry, workflow_named(name))
    await client.apply(run_document(name, registry=registry))
    body = await client.wait_phase(name, "Ready")
    endpoint: str = body["status"]["endpoint"]
    assert (await invoke(endpoint, {"review": "fine"}))[:2] == (200, "1.0.0-g1")
    return endpoint


async def test_a_runner_killed_with_sigkill_is_routed_where_it_comes_back(
    client: Client, registry: Path
) -> None:
    name = "follow-kill"
    endpoint = await deploy(client, registry, name)
    before = await route_of(client, name)
    assert before.stable is not None and before.stable.serving
    old_port = urlparse(before.stable.url).port
    assert old_port is not None
    seen_down: list[dict[str, Any]] = []

    with port_taken_after_kill(await observed_pid(client, name), old_port):

        def back_up(body: dict[str, Any] | None) -> bool:
            condition = serving_condition((body or {}).get("status") or {})
            if condition and condition["status"] == "False":
                seen_down.append(condition)
            return bool(seen_down and condition and condition["status"] == "True")

        await client.wait_for(name, back_up, timeout_s=BACK_WITHIN_S, what="serving again")
        await invokes_again(endpoint, within_s=5)

    after = await route_of(client, name)
    assert after.stable is not None and after.stable.serving
    assert urlparse(after.stable.url).port != old_port
    assert seen_down[0]["reason"] == "RunnerStarting"
    assert "stable 1.0.0-g1 is not serving" in seen_down[0]["message"]


@contextlib.contextmanager
def port_taken_after_kill(pid: int, port: int) -> Iterator[None]:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while True:
        try:
            with port_taken(port):
                yield
            return
        except OSError:  # the dying runner still holds it for a moment
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


async def test_a_local_backend_killed_with_sigkill_keeps_every_runner_serving(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    name = "follow-backend-kill"
    endpoint = await deploy(client, registry, name)
    pid = await observed_pid(client, name)
    backend = stack.local_backends()[BACKEND]
    restarts = backend.restarts

    os.kill(backend.pid, signal.SIGKILL)

    # The runner is adopted, not restarted: it serves throughout, on the same address.
    deadline = time.monotonic() + BACK_WITHIN_S
    while backend.restarts == restarts and time.monotonic() < deadline:
        assert (await invoke(endpoint, {"review": "fine"}))[:2] == (200, "1.0.0-g1")
        await asyncio.sleep(0.1)
    assert backend.restarts > restarts
    await asyncio.sleep(2)  # the new local-backend adopts and reports the runner
    assert (await invoke(endpoint, {"review": "fine"}))[:2] == (200, "1.0.0-g1")
    assert await observed_pid(client, name) == pid
    condition = serving_condition(await client.status(name))
    assert condition is not None and condition["status"] == "True"


async def test_plnt_up_restarted_on_the_same_data_dir_serves_again_without_a_reapply(
    tmp_path: Path, registry: Path
) -> None:
    name = "follow-restart"
    data_dir = tmp_path / "stack"
    stack = await asyncio.to_thread(start_stack, data_dir)
    try:
        bus = await Bus.open(stack.config.nats_url, service="test", wait_for_server=True)
        client = Client(bus)
        await client.apply(backend_document())
        await deploy(client, registry, name)
        first = await route_of(client, name)
        await bus.close()
    finally:
        await asyncio.to_thread(stack.stop)
    assert first.stable is not None
    old_port = urlparse(first.stable.url).port
    assert old_port is not None

    # Back with its runner's old port taken: the runner comes back elsewhere.
    with port_taken(old_port):
        stack = await asyncio.to_thread(start_stack, data_dir)
        try:
            bus = await Bus.open(stack.config.nats_url, service="test", wait_for_server=True)
            client = Client(bus)
            seconds = await invokes_again(invoke_url(stack, name), within_s=BACK_WITHIN_S)
            moved = await route_of(client, name)
            await client.wait_for(name, serving_is("True"), what="Serving again")
            await bus.close()
        finally:
            await asyncio.to_thread(stack.stop)
    assert moved.stable is not None and moved.stable.serving
    assert urlparse(moved.stable.url).port != old_port
    assert seconds < BACK_WITHIN_S

    # Back with the port free: the runner starts on the port it had, the route stays put.
    stack = await asyncio.to_thread(start_stack, data_dir)
    try:
        bus = await Bus.open(stack.config.nats_url, service="test", wait_for_server=True)
        client = Client(bus)
        await invokes_again(invoke_url(stack, name), within_s=BACK_WITHIN_S)
        again = await route_of(client, name)
        await bus.close()
    finally:
        await asyncio.to_thread(stack.stop)
    assert again.stable is not None and again.stable.url == moved.stable.url


def invoke_url(stack: Supervisor, name: str) -> str:
    """This stack's router (a restarted stack in a test gets new ports)."""
    return f"{stack.config.router_url}/workflows/{name}/invoke"


def serving_is(wanted: str) -> Callable[[dict[str, Any] | None], bool]:
    def check(body: dict[str, Any] | None) -> bool:
        condition = serving_condition((body or {}).get("status") or {})
        return condition is not None and condition["status"] == wanted

    return check


async def test_a_runner_the_local_backend_gives_up_on_reads_not_serving_runner_failed(
    tmp_path: Path, registry: Path
) -> None:
    name = "follow-gave-up"
    stack = await asyncio.to_thread(
        start_stack, tmp_path / "stack", env={"PLNT_LOCAL_BACKEND_MAX_RESTARTS": "0"}
    )
    try:
        bus = await Bus.open(stack.config.nats_url, service="test", wait_for_server=True)
        client = Client(bus)
        await client.apply(backend_document())
        await deploy(client, registry, name)
        os.kill(await observed_pid(client, name), signal.SIGKILL)

        body = await client.wait_for(name, serving_is("False"), timeout_s=BACK_WITHIN_S)
        # The router sends nothing to a runner reported down: 503 nothing ready, not 502.
        await asyncio.sleep(0.5)
        code, _, answer = await invoke(invoke_url(stack, name), {"review": "fine"})
        await bus.close()
    finally:
        await asyncio.to_thread(stack.stop)
    assert body is not None
    condition = serving_condition(body["status"])
    assert condition is not None and condition["reason"] == "RunnerFailed"
    assert "gave up after 1 failed starts in a row" in condition["message"]
    assert body["status"]["phase"] == "Ready"  # the saga's history is unchanged
    assert code == 503, answer
    row = render.workflowrun_rows([body]).splitlines()[1]
    assert "Ready   False (RunnerFailed)" in row
