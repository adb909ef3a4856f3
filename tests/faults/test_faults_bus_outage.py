"""The bus unreachable for 10 s mid-saga, and stale events replayed from an older generation."""

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from side_effects import ONE_READY_SAGA, counting_env, side_effects, side_effects_since
from stack_fixtures import start_stack
from stack_support import Client, delayed_endpoint, publish_spec, run_document, workflow_named
from test_faults_deadlines_and_deletes import reach

from plnt_cli.supervisor import Supervisor
from plnt_common import subjects
from plnt_common.events import EventType
from plnt_common.routes import RouteEntry

OUTAGE_S = 10


@pytest.fixture(scope="module")
def counted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("outage-metrics")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, counted: Path) -> Iterator[Supervisor]:
    supervisor = start_stack(tmp_path_factory.mktemp("outage"), env=counting_env(counted))
    yield supervisor
    supervisor.stop()


@pytest.fixture
async def slow_upstream() -> AsyncIterator[str]:
    """Answers after 400 ms: keeps the smoke step busy across the outage."""
    async with delayed_endpoint(0.4) as url:
        yield url


async def test_a_saga_survives_the_bus_being_unreachable_for_ten_seconds(
    client: Client, registry: Path, stack: Supervisor, slow_upstream: str, counted: Path
) -> None:
    before = side_effects(counted)
    steps = [{"id": "slow", "tool": "http.request", "with": {"url": slow_upstream}}]
    publish_spec(registry, workflow_named("outage", steps=steps))
    reached = asyncio.create_task(reach(client, "outage", "Smoking"))
    await asyncio.sleep(0.1)
    await client.apply(run_document("outage", registry=registry, smoke_invocations=8))
    await reached

    stack.stop_nats()  # smoke finishes during the outage and must retry its publish
    await asyncio.sleep(OUTAGE_S)
    stack.start_nats()

    await client.wait_phase("outage", "Ready", timeout_s=90)
    kinds = Counter(e.event_type for e in await client.events("outage"))
    assert sum(n for kind, n in kinds.items() if kind.is_terminal) == 1, kinds
    # Each side effect once, counted by the processes that did it: a step that ran again
    # after the outage would publish an event the duplicate window drops, unseen above.
    assert side_effects_since(counted, before) == ONE_READY_SAGA


async def wait_consumed(
    client: Client, services: tuple[str, ...], *, timeout_s: float = 30
) -> None:
    """Until each service's durable consumer was handed, and acknowledged, every message of
    its filter stored so far (a filtered consumer's ack floor stops at its own last message,
    so the server's pending counts say it, not a stream sequence)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    for service in services:
        durable = subjects.durable_name(service)
        while True:
            info = await client.bus.js.consumer_info(subjects.STREAM, durable)
            if info.num_pending == 0 and info.num_ack_pending == 0:
                break
            assert asyncio.get_running_loop().time() < deadline, (service, info)
            await asyncio.sleep(0.05)


async def test_stale_events_of_an_older_generation_never_promote(
    client: Client, registry: Path
) -> None:
    publish_spec(registry, workflow_named("stale"))
    publish_spec(registry, workflow_named("stale", "2.0.0"))
    await client.apply(run_document("stale", registry=registry))
    await client.wait_phase("stale", "Ready")
    await client.apply(run_document("stale", registry=registry, ref="stale@2.0.0"))
    await client.wait_phase("stale", "Ready", generation=2)
    old = [e for e in await client.events("stale") if e.sagaid == "default.stale.1.1"]
    replayed = [
        e for e in old if e.event_type in (EventType.CANARY_INSTALLED, EventType.SMOKE_PASSED)
    ]
    assert len(replayed) == 2

    for event in replayed:  # as a broken producer would: new ids, no Nats-Msg-Id to dedup
        fresh = event.model_copy(update={"id": f"replayed-{event.id}"})
        subject = subjects.event_subject(event.event_type, event.namespace, event.name)
        await client.bus.js.publish(subject, fresh.model_dump_json().encode())
    # every consumer of those events handled and acknowledged them before anything is judged
    await wait_consumed(client, ("smoke", "promoter", "watcher"))

    status = await client.status("stale")
    assert (status["phase"], status["revision"], status["observedGeneration"]) == (
        "Ready",
        "2.0.0-g2",
        2,
    )
    entry = await client.bus.routes.get("default.stale")
    route = RouteEntry.model_validate(json.loads(entry.value or b"{}"))
    assert route.stable is not None and route.stable.revision == "2.0.0-g2"
    assert route.canary is None
    first_saga = Counter(
        e.event_type for e in await client.events("stale") if e.sagaid == "default.stale.1.1"
    )
    assert first_saga[EventType.RUN_READY] == 1
