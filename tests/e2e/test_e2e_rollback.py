"""Instant rollback on the real stack: the previous revision kept at 0 % after promotion and
retired when its window ends, `plnt rollback` moving the route back to it at once, every
service its own process (the guard's tests are in test_e2e_guard)."""

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from canary_load import Load
from rollback_support import NEXT, STABLE, two_versions
from side_effects import counting_env, side_effects, side_effects_since
from stack_fixtures import start_stack
from stack_support import Client, replayed_projections
from test_e2e_llm_and_ops import alive
from test_e2e_manual_gate import plnt_process, refused_line

from plnt_cli.supervisor import Supervisor
from plnt_common.events import EventType, OperatorRequest, new_event
from plnt_common.releases import release_name

SWITCH_BOUND_S = 1.0
"""From the request to the router answering from the previous revision (the KV write, the
router's watch; the benchmark measures it)."""


@pytest.fixture(scope="module")
def counted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rollback-metrics")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, counted: Path) -> Iterator[Supervisor]:
    supervisor = start_stack(tmp_path_factory.mktemp("rollback"), env=counting_env(counted))
    yield supervisor
    supervisor.stop()


async def request_rollback(client: Client, name: str) -> None:
    """Publish ``rollback.requested`` under the Ready saga's id, as the watcher does."""
    event = new_event(
        EventType.ROLLBACK_REQUESTED,
        OperatorRequest(by="test"),
        namespace="default",
        name=name,
        sagaid=f"default.{name}.2.1",
        generation=2,
        source="test",
    )
    await client.bus.publish(event)


async def terminals_by_saga(client: Client, name: str) -> dict[str, list[EventType]]:
    ended: dict[str, list[EventType]] = {}
    for event in await client.events(name):
        if event.event_type.is_terminal:
            ended.setdefault(event.sagaid, []).append(event.event_type)
    return ended


def released(name: str, generation: int) -> list[str]:
    """The release keys of a run left with one release."""
    release = release_name("default", name, generation)
    return [f"desired.default.{release}", f"observed.default.{release}"]


async def wait_released(client: Client, name: str, keys: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while await client.release_keys(name) != keys:
        assert time.monotonic() < deadline, f"releases {await client.release_keys(name)}"
        await asyncio.sleep(0.1)


async def test_the_previous_revision_stays_up_for_the_keep_window_then_is_retired(
    client: Client, registry: Path
) -> None:
    name = "keep-window"
    await two_versions(client, registry, name, rollback={"keepPreviousFor": "3s"})
    ready_at = time.monotonic()
    first, second = await client.observed_pids(name)
    assert alive(first) and alive(second)
    await wait_released(client, name, released(name, 2), 15)
    assert time.monotonic() - ready_at >= 1.5  # kept for the window, not retired at once
    for _ in range(50):
        if not alive(first):
            break
        await asyncio.sleep(0.1)
    assert not alive(first) and alive(second)


async def test_plnt_rollback_moves_the_router_back_at_once_and_ends_reverted_once(
    client: Client, registry: Path, counted: Path, stack: Supervisor
) -> None:
    name = "rollback-now"
    await two_versions(client, registry, name, rollback={"keepPreviousFor": "60s"})
    endpoint = (await client.status(name))["endpoint"]
    before = side_effects(counted)
    load = Load(endpoint, concurrency=4)
    async with load.running():
        await asyncio.sleep(0.5)
        code, out, err = await plnt_process(stack, "rollback", name)
        await asyncio.sleep(0.5)
    assert code == 0, (out, err)
    assert out.splitlines()[-1] == f"workflowrun/{name} rolled back: phase Reverted"
    # from the request event (the watcher publishes it for the CLI) to the router's switch
    request = next(e for e in await client.events(name) if e.type.endswith("rollback.requested"))
    requested = request.time.timestamp() - time.time() + time.monotonic()
    served_next = [c for c in load.calls if c.revision == NEXT]
    assert served_next, "the promoted revision served before the rollback"
    switched = max(c.ended for c in served_next) - requested
    assert switched < SWITCH_BOUND_S, f"the router served {NEXT} {switched:.3f}s after"
    assert load.calls[-1].revision == STABLE
    failed = [c for c in load.calls if c.status != 200]
    assert not failed, f"{len(failed)} of {len(load.calls)} calls failed: {failed[:5]}"
    body = await client.wait_phase(name, "Reverted", generation=2, timeout_s=5)
    status = body["status"]
    assert status["revision"] == STABLE
    assert status["message"].startswith(
        f"reverted {NEXT} to {STABLE}: rollback requested by plnt.work/rollback="
    )
    assert await terminals_by_saga(client, name) == {
        f"default.{name}.1.1": [EventType.RUN_READY],
        f"default.{name}.2.1": [EventType.RUN_READY],
        f"default.{name}.2.2": [EventType.RUN_REVERTED],
    }
    await wait_released(client, name, released(name, 1), 10)
    assert side_effects_since(counted, before) == {
        ("promoter", "route_write"): 1,
        ("promoter", "terminal_claim"): 1,
        ("installer", "release_retirement"): 1,
    }


async def test_a_rollback_with_nothing_kept_does_nothing(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    name = "rollback-none"
    await two_versions(client, registry, name)
    # without keepPreviousFor the previous revision is retired at promotion
    await wait_released(client, name, released(name, 2), 5)
    refused = refused_line(await plnt_process(stack, "rollback", name))
    assert refused == f"plnt: workflowrun/{name} has no previous revision kept to roll back to"
    await request_rollback(client, name)  # as if the request came anyway: the promoter refuses
    await asyncio.sleep(1.5)
    status = await client.status(name)
    assert (status["phase"], status["revision"]) == ("Ready", NEXT)
    assert f"default.{name}.2.2" not in await terminals_by_saga(client, name)


async def test_replay_rebuilds_the_projection_of_reverted_runs(
    client: Client, stack: Supervisor
) -> None:
    before, replayed = await replayed_projections(client, stack.config.nats_url)
    assert any(p.status.phase == "Reverted" for p in before.values())
    assert replayed == before


@pytest.mark.slow
async def test_an_installer_killed_in_the_keep_window_still_retires_the_previous_later(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    name = "keep-kill"
    await two_versions(client, registry, name, rollback={"keepPreviousFor": "2s"})
    installer = next(p for p in stack.services() if p.name == "installer")
    os.kill(installer.pid, signal.SIGKILL)
    first, _ = await client.observed_pids(name)
    # the held run.ready comes back after the consumer's ack wait; the window has passed
    await wait_released(client, name, released(name, 2), 60)
    for _ in range(50):
        if not alive(first):
            break
        await asyncio.sleep(0.1)
    assert not alive(first)
    assert installer.restarts >= 1
