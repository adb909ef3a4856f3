"""``spec.placement.failover``: when a backend loses a run's runner for good, the run (or,
spread over several backends, the lost copy) is replaced on the next backend that fits,
and the lost copy is retired.

The stack's local-backends give up on a runner at its first exit
(``PLNT_LOCAL_BACKEND_MAX_RESTARTS=0``: ``RunnerFailed``), and the watcher replaces a run
lost for 1 s, so the test kills east's runner and watches the replacement land on west.
"""

import asyncio
import contextlib
import copy
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.js.errors import KeyDeletedError, KeyNotFoundError
from stack_fixtures import start_stack
from stack_support import Client, LiveLoad, invoke, publish_spec, run_document, workflow_named
from test_e2e_local_backends import local_backend, process_of, wait_until
from test_e2e_spread import observed_record, route_endpoints

from plnt_cli.supervisor import Supervisor
from plnt_common.events import EventType
from plnt_common.releases import release_name, spread_release_name

LOST_AFTER_S = 1.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisor]:
    env = {
        "PLNT_LOCAL_BACKEND_MAX_RESTARTS": "0",
        "PLNT_WATCHER_REPLACE_LOST_AFTER_S": str(LOST_AFTER_S),
    }
    supervisor = start_stack(tmp_path_factory.mktemp("failover-stack"), env=env)
    yield supervisor
    supervisor.stop()


def failover_run(registry: Path, name: str, *, failover: bool = True) -> dict[str, Any]:
    """A run on east or west whose later rollouts are stepped and gated: a replacement,
    which is no rollout, must go through neither."""
    document = copy.deepcopy(run_document(name, registry=registry))
    del document["spec"]["backend"]["cluster"]
    document["spec"]["placement"] = {"backends": ["east", "west"], "failover": failover}
    document["spec"]["canary"].update(steps=[50], stepInterval="10m", manualGate=True)
    return document


async def desired(client: Client, release: str) -> bool:
    with contextlib.suppress(KeyNotFoundError, KeyDeletedError):
        entry = await client.bus.releases.get(f"desired.default.{release}")
        return bool(entry.value)
    return False


async def kill_runner(client: Client, release: str) -> None:
    """SIGKILL the release's runner; the local-backend reports it Failed (no restart)."""
    record = await observed_record(client, release)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(int(record["pid"]), signal.SIGKILL)


async def ready_on_east(
    client: Client, registry: Path, stack: Supervisor, name: str, *, failover: bool = True
) -> dict[str, Any]:
    """Both backends up, the run applied and Ready on east, the first it prefers."""
    for backend in ("east", "west"):
        await client.apply(local_backend(backend))
        await process_of(stack, backend)
    publish_spec(registry, workflow_named(name))
    await client.apply(failover_run(registry, name, failover=failover))
    return await client.wait_phase(name, "Ready", timeout_s=120)


async def requested_sagas(client: Client, name: str) -> list[str]:
    return [e.sagaid for e in await client.events(name) if e.event_type is EventType.RUN_REQUESTED]


async def test_a_run_whose_runner_is_lost_is_replaced_on_the_next_backend(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    name = "failover"
    body = await ready_on_east(client, registry, stack, name)
    assert [(e["backend"], e["state"]) for e in body["status"]["placement"]] == [
        ("east", "Serving")
    ]
    on_east = release_name("default", name, 1)
    on_west = spread_release_name("default", name, 1, "west")

    await kill_runner(client, on_east)

    def replaced(body: dict[str, Any] | None) -> bool:
        status = (body or {}).get("status") or {}
        phase = status.get("phase")
        assert phase not in ("Progressing", "Paused", "Failed", "RolledBack"), status
        return phase == "Ready" and status.get("sagaId") == f"default.{name}.1.2"

    body = await client.wait_for(name, replaced, timeout_s=120, what="replaced on west")
    assert body is not None
    status = body["status"]
    assert status["revision"] == "1.0.0-g1"  # the same revision: a replacement, no rollout
    placement = [(e["backend"], e["state"]) for e in status["placement"]]
    assert placement == [("west", "Serving"), ("east", "Lost")]
    lost = status["placement"][1]["reason"]
    assert lost.startswith("RunnerFailed"), lost
    assert "replaced on the next backend that fits" in lost

    code, revision, _ = await invoke(status["endpoint"], {"text": "still answered"})
    assert (code, revision) == (200, "1.0.0-g1")
    west = await observed_record(client, on_west)
    assert west["backend_name"] == "west"
    assert west["phase"] == "Ready"

    # the lost copy is retired once the replacement is promoted, and only one was asked for
    deadline = time.monotonic() + 30
    while await desired(client, on_east):
        assert time.monotonic() < deadline, f"{on_east} still desired 30s after the replacement"
        await asyncio.sleep(0.2)
    assert await desired(client, on_west)
    await asyncio.sleep(3 * LOST_AFTER_S)
    sagas = await requested_sagas(client, name)
    assert sagas == [f"default.{name}.1.1", f"default.{name}.1.2"]


async def test_without_failover_a_lost_runner_is_reported_and_left_where_it_is(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    name = "no-failover"
    await ready_on_east(client, registry, stack, name, failover=False)

    await kill_runner(client, release_name("default", name, 1))

    def reported(body: dict[str, Any] | None) -> bool:
        conditions = ((body or {}).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Serving" and c["reason"] == "RunnerFailed" for c in conditions)

    await client.wait_for(name, reported, timeout_s=60, what="reported RunnerFailed")
    await asyncio.sleep(3 * LOST_AFTER_S)
    assert await requested_sagas(client, name) == [f"default.{name}.1.1"]


async def test_a_spread_runs_lost_copy_is_replaced_while_the_other_answers_every_call(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    name = "failover-spread"
    for backend in ("east", "west", "burst"):
        await client.apply(local_backend(backend))
        await process_of(stack, backend)
    publish_spec(registry, workflow_named(name))
    document = failover_run(registry, name)
    document["spec"]["placement"] = {
        "backends": ["east", "west", "burst"],
        "spread": 2,
        "failover": True,
    }
    await client.apply(document)
    body = await client.wait_phase(name, "Ready", timeout_s=120)
    assert [(e["backend"], e["state"]) for e in body["status"]["placement"]] == [
        ("east", "Serving"),
        ("west", "Serving"),
    ]
    on_east = release_name("default", name, 1)
    on_west = spread_release_name("default", name, 1, "west")
    on_burst = spread_release_name("default", name, 1, "burst")
    west_before = await observed_record(client, on_west)

    def replaced(body: dict[str, Any] | None) -> bool:
        status = (body or {}).get("status") or {}
        assert status.get("phase") not in ("Progressing", "Paused", "Failed"), status
        return status.get("phase") == "Ready" and status.get("sagaId") == f"default.{name}.1.2"

    async with LiveLoad(body["status"]["endpoint"], revision="1.0.0-g1") as load:
        await wait_until("calls before the loss", lambda: len(load.calls) >= 10)
        await kill_runner(client, on_east)
        body = await client.wait_for(name, replaced, timeout_s=120, what="replaced on burst")
        after = len(load.calls)
        await wait_until("calls after the replacement", lambda: len(load.calls) >= after + 50)

    assert not load.failures, load.failures[:5]
    assert body is not None
    assert [(e["backend"], e["state"]) for e in body["status"]["placement"]] == [
        ("burst", "Serving"),
        ("east", "Lost"),
        ("west", "Serving"),
    ]
    # west's copy served through it all: still desired, the same runner
    assert await desired(client, on_west), "west's copy was retired with the lost one"
    assert (await observed_record(client, on_west))["pid"] == west_before["pid"]
    endpoints = await route_endpoints(client, name)
    assert [(e["backend"], e["release"], e["serving"]) for e in endpoints] == [
        ("west", on_west, True),
        ("burst", on_burst, True),
    ]
    deadline = time.monotonic() + 30
    while await desired(client, on_east):
        assert time.monotonic() < deadline, f"{on_east} still desired 30s after the replacement"
        await asyncio.sleep(0.2)
    assert await desired(client, on_west) and await desired(client, on_burst)
    sagas = await requested_sagas(client, name)
    assert sagas == [f"default.{name}.1.1", f"default.{name}.1.2"]
