"""``spec.placement.spread: 2`` on the embedded stack with two `local` backends: the run's
runner is installed on both (each started by its own backend's local-backend process),
``status.placement`` says both serve, the route lists one endpoint per backend, and when
one backend's process and runner are killed under a live load every call is answered
from the other."""

import asyncio
import contextlib
import copy
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from canary_load import Load
from nats.js.errors import KeyDeletedError, KeyNotFoundError
from stack_support import Client, LiveLoad, publish_spec, run_document, workflow_named
from test_e2e_canary_steps import stepped
from test_e2e_local_backends import local_backend, parent_of, process_of, wait_until

from plnt_cli.supervisor import Supervisor
from plnt_common.events import Envelope, EventType
from plnt_common.releases import release_name, spread_release_name
from plnt_testkit.polling import recorded_changes

RUN = "spread"


def spread_run(registry: Path, name: str = RUN, traffic_percent: int = 10) -> dict[str, Any]:
    document = copy.deepcopy(run_document(name, registry=registry, traffic_percent=traffic_percent))
    del document["spec"]["backend"]["cluster"]
    document["spec"]["placement"] = {"backends": ["east", "west"], "spread": 2}
    return document


async def observed_record(client: Client, release: str) -> dict[str, Any]:
    entry = await client.bus.releases.get(f"observed.default.{release}")
    record: dict[str, Any] = json.loads(entry.value or b"{}")
    return record


async def route_endpoints(client: Client, name: str = RUN) -> list[dict[str, Any]]:
    entry = await client.bus.routes.get(f"default.{name}")
    route: dict[str, Any] = json.loads(entry.value or b"{}")
    endpoints: list[dict[str, Any]] = route["stable"]["endpoints"]
    return endpoints


async def test_a_spread_run_serves_from_both_backends_and_survives_losing_one(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    for backend in ("east", "west"):
        await client.apply(local_backend(backend))
    east, west = await process_of(stack, "east"), await process_of(stack, "west")
    publish_spec(registry, workflow_named(RUN))
    await client.apply(spread_run(registry))
    body = await client.wait_phase(RUN, "Ready", timeout_s=120)

    assert [(e["backend"], e["state"]) for e in body["status"]["placement"]] == [
        ("east", "Serving"),
        ("west", "Serving"),
    ]
    on_east = await observed_record(client, release_name("default", RUN, 1))
    on_west = await observed_record(client, spread_release_name("default", RUN, 1, "west"))
    assert (on_east["backend_name"], on_west["backend_name"]) == ("east", "west")
    assert parent_of(int(on_east["pid"])) == east.pid
    assert parent_of(int(on_west["pid"])) == west.pid
    assert [(e["backend"], e["url"], e["serving"]) for e in await route_endpoints(client)] == [
        ("east", on_east["url"], True),
        ("west", on_west["url"], True),
    ]

    async with LiveLoad(body["status"]["endpoint"], revision="1.0.0-g1") as load:
        await wait_until("calls before the kill", lambda: len(load.calls) >= 10)
        os.kill(east.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(on_east["pid"]), signal.SIGKILL)
        before_kill = len(load.calls)
        # the first calls after the kill meet east's dead runner: the router must answer
        # them from west (a retry before any byte was sent), then leave east out
        await wait_until("calls after the kill", lambda: len(load.calls) >= before_kill + 100)

    assert not load.failures, load.failures[:5]


async def desired_releases(client: Client, name: str, generations: int) -> list[str]:
    """The run's desired releases on east (the generation's name) and west (``-west``)."""
    found = []
    for generation in range(1, generations + 1):
        for release in (
            release_name("default", name, generation),
            spread_release_name("default", name, generation, "west"),
        ):
            with contextlib.suppress(KeyNotFoundError, KeyDeletedError):
                entry = await client.bus.releases.get(f"desired.default.{release}")
                if entry.value:
                    found.append(release)
    return found


async def test_a_new_generation_of_a_spread_run_replaces_its_copy_on_every_backend(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    name = "spread-next"
    for backend in ("east", "west"):
        await client.apply(local_backend(backend))
    await process_of(stack, "east")
    await process_of(stack, "west")
    publish_spec(registry, workflow_named(name))
    await client.apply(spread_run(registry, name))
    await client.wait_phase(name, "Ready", timeout_s=120)

    await client.apply(spread_run(registry, name, traffic_percent=20))
    body = await client.wait_phase(name, "Ready", generation=2, timeout_s=120)

    assert body["status"]["revision"] == "1.0.0-g2"
    assert [(e["backend"], e["state"]) for e in body["status"]["placement"]] == [
        ("east", "Serving"),
        ("west", "Serving"),
    ]
    # both copies of generation 1 retired (after Ready: run.ready starts the retirement)
    wanted = [f"default-{name}-g2", f"default-{name}-g2-west"]
    deadline = time.monotonic() + 30
    while (held := await desired_releases(client, name, generations=2)) != wanted:
        assert time.monotonic() < deadline, f"still desired 30s after Ready: {held}"
        await asyncio.sleep(0.2)
    endpoints = await route_endpoints(client, name)
    assert [(e["backend"], e["serving"]) for e in endpoints] == [("east", True), ("west", True)]


async def desired(client: Client, release: str) -> bool:
    with contextlib.suppress(KeyNotFoundError, KeyDeletedError):
        entry = await client.bus.releases.get(f"desired.default.{release}")
        return bool(entry.value)
    return False


async def walk_state(client: Client, name: str, later_copy: str) -> tuple[str, int, bool] | None:
    """(The route's canary release, its weight, whether ``later_copy`` is a desired
    release); None before the route is written."""
    try:
        entry = await client.bus.routes.get(f"default.{name}")
    except (KeyNotFoundError, KeyDeletedError):
        return None
    route = json.loads(entry.value or b"{}")
    canary = route.get("canary") or {}
    return (
        canary.get("release", ""),
        route.get("canary_weight", 0),
        await desired(client, later_copy),
    )


def walk_states(
    client: Client, name: str, later_copy: str
) -> contextlib.AbstractAsyncContextManager[list[tuple[str, int, bool]]]:
    """Every change of ``walk_state`` while the block runs."""
    return recorded_changes(lambda: walk_state(client, name, later_copy))


async def spread_and_ready(client: Client, registry: Path, stack: Supervisor, name: str) -> str:
    """East and west registered, ``name`` 1.0.0 Ready on both, 2.0.0 published: the
    endpoint."""
    for backend in ("east", "west"):
        await client.apply(local_backend(backend))
    await process_of(stack, "east")
    await process_of(stack, "west")
    publish_spec(registry, workflow_named(name))
    publish_spec(registry, workflow_named(name, "2.0.0"))
    await client.apply(spread_run(registry, name))
    body = await client.wait_phase(name, "Ready", timeout_s=120)
    endpoint: str = body["status"]["endpoint"]
    return endpoint


def saga_kinds(events: list[Envelope], sagaid: str) -> list[tuple[str, str]]:
    """(event type, the backend it names) of one saga, in stream order."""

    def backend(event: Envelope) -> str:
        named = event.data.get("backend", "")  # spec.pulled's is the PlntBackend's spec
        return named if isinstance(named, str) else str(event.data["backend_name"])

    return [
        (e.event_type.value, backend(e))
        for e in events
        if e.sagaid == sagaid and e.event_type is not EventType.CANARY_STEPPED
    ]


async def test_a_new_revision_walks_the_backends_one_canary_at_a_time(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    name = "spread-walk"
    endpoint = await spread_and_ready(client, registry, stack, name)
    document = spread_run(registry, name)
    walked = stepped(document, [50], "3s", minInvocations=10)
    on_east = release_name("default", name, 2)
    on_west = spread_release_name("default", name, 2, "west")
    load = Load(endpoint, concurrency=4)
    async with load.running(), walk_states(client, name, on_west) as states:
        await client.apply(walked)
        body = await client.wait_phase(name, "Ready", generation=2, timeout_s=120)

    # one copy took the canary's share at a time: east's (trafficPercent through its smoke
    # test, then its step), then west's, installed only once east's step had passed (east
    # holding its weight meanwhile)
    assert [s for s in states if s[1] > 0] == [
        (on_east, 10, False),
        (on_east, 50, False),
        (on_east, 50, True),
        (on_west, 10, True),
        (on_west, 50, True),
    ]
    events = await client.events(name)
    assert saga_kinds(events, f"default.{name}.2.1") == [
        ("run.requested", ""),
        ("spec.pulled", "east"),
        ("canary.installed", "east"),
        ("smoke.passed", "east"),
        ("analysis.passed", "east"),
        ("canary.installed", "west"),
        ("smoke.passed", "west"),
        ("analysis.passed", "west"),
        ("run.ready", ""),
    ]
    walk = [
        (e.event_type, e.data["step"], e.data["backend"])
        for e in events
        if e.event_type in (EventType.CANARY_STEPPED, EventType.ANALYSIS_PASSED)
        and e.sagaid == f"default.{name}.2.1"
    ]
    assert walk == [
        (EventType.CANARY_STEPPED, 1, "east"),
        (EventType.ANALYSIS_PASSED, 1, "east"),
        (EventType.CANARY_STEPPED, 2, "west"),
        (EventType.ANALYSIS_PASSED, 2, "west"),
    ]
    status = body["status"]
    assert (status["revision"], status["analysis"]["step"]) == ("2.0.0-g2", "2/2 on west")
    assert status["analysis"]["canary"]["invocations"] >= 10
    served = [c for c in load.calls if c.status == 200]
    assert len(served) == len(load.calls), f"{len(load.calls) - len(served)} calls failed"
    # promoted: both copies serve the new revision
    endpoints = await route_endpoints(client, name)
    assert [(e["backend"], e["release"], e["serving"]) for e in endpoints] == [
        ("east", on_east, True),
        ("west", on_west, True),
    ]


async def test_a_copy_failing_on_the_second_backend_rolls_back_everywhere(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    """West's copy cannot start (its PlntBackend now names an API key that is not set):
    the walk has east's copy taking live calls, so the route is restored before both
    copies are removed, and the stable keeps serving every call on both backends."""
    name = "spread-walk-fails"
    endpoint = await spread_and_ready(client, registry, stack, name)
    broken = local_backend("west")
    broken["spec"]["llm"] = {
        "baseUrl": "http://127.0.0.1:9/v1",
        "model": "m",
        "apiKeyEnv": "PLNT_UNSET_KEY",
    }
    await client.apply(broken)
    walked = stepped(spread_run(registry, name), [50], "2s", minInvocations=5)
    load = Load(endpoint, concurrency=4)
    async with load.running():
        await client.apply(walked)
        # seconds after install.failed; a route left as it was would hold the saga until
        # its Installing deadline, past this wait
        body = await client.wait_phase(name, "RolledBack", generation=2, timeout_s=45)
        calls_at_the_end = len(load.calls)
        await wait_until("calls after", lambda: len(load.calls) >= calls_at_the_end + 20)

    status = body["status"]
    assert status["revision"] == "1.0.0-g1"
    assert "west" in status["message"] and "PLNT_UNSET_KEY" in status["message"]
    events = await client.events(name)
    assert saga_kinds(events, f"default.{name}.2.1") == [
        ("run.requested", ""),
        ("spec.pulled", "east"),
        ("canary.installed", "east"),
        ("smoke.passed", "east"),
        ("analysis.passed", "east"),
        ("install.failed", "west"),
        ("route.restored", ""),
        ("run.rolled_back", ""),
    ]
    # the copies were removed (and the saga ended) because the route was restored first
    (restored,) = [e for e in events if e.event_type is EventType.ROUTE_RESTORED]
    (rolled_back,) = [e for e in events if e.event_type is EventType.RUN_ROLLED_BACK]
    assert rolled_back.causationid == restored.id
    served = [c for c in load.calls if c.status == 200]
    assert len(served) == len(load.calls), f"{len(load.calls) - len(served)} calls failed"
    assert {c.revision for c in load.calls[calls_at_the_end:]} == {"1.0.0-g1"}
    # neither copy of generation 2 is left; generation 1 serves on both backends
    assert await desired_releases(client, name, generations=2) == [
        release_name("default", name, 1),
        spread_release_name("default", name, 1, "west"),
    ]
    endpoints = await route_endpoints(client, name)
    assert [(e["backend"], e["serving"]) for e in endpoints] == [("east", True), ("west", True)]
