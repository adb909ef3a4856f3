"""A step that never answers is timed out and compensated; deletion in any phase cleans up."""

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from side_effects import counting_env, side_effects
from stack_fixtures import start_stack
from stack_support import (
    Client,
    backend_document,
    delayed_endpoint,
    publish_spec,
    run_document,
    workflow_named,
)

from plnt_cli.supervisor import Supervisor
from plnt_common.bus.bus import Bus
from plnt_common.events import EventType

SMOKING_DEADLINE_S = 3


@pytest.fixture(scope="module")
def counted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("deadline-metrics")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, counted: Path) -> Iterator[Supervisor]:
    env = {
        **counting_env(counted),
        "PLNT_WATCHER_DEADLINE_SMOKING_S": str(SMOKING_DEADLINE_S),
        "PLNT_SMOKE_REQUEST_TIMEOUT_S": "120",
    }
    supervisor = start_stack(tmp_path_factory.mktemp("deadlines"), env=env)
    yield supervisor
    supervisor.stop()


@pytest.fixture
async def client(stack: Supervisor) -> AsyncIterator[Client]:
    bus = await Bus.open(stack.config.nats_url, service="test", wait_for_server=True)
    test_client = Client(bus)
    await test_client.apply(backend_document())
    yield test_client
    await bus.close()


@pytest.fixture
async def silent_upstream() -> AsyncIterator[str]:
    """Accepts the request and never answers (within any test's life)."""
    async with delayed_endpoint(3600) as url:
        yield url


async def test_a_smoke_step_past_its_deadline_is_timed_out_and_compensated(
    client: Client, registry: Path, silent_upstream: str, counted: Path
) -> None:
    before = side_effects(counted)
    steps = [{"id": "hang", "tool": "http.request", "with": {"url": silent_upstream}}]
    publish_spec(registry, workflow_named("stuck", steps=steps))
    await client.apply(run_document("stuck", registry=registry))

    body = await client.wait_phase("stuck", "Failed", timeout_s=60)
    assert "Smoking passed its 3s deadline" in body["status"]["message"]
    kinds = [e.event_type for e in await client.events("stuck")]
    assert EventType.STEP_TIMED_OUT in kinds
    assert kinds.count(EventType.STEP_TIMED_OUT) == 1
    assert sum(1 for kind in kinds if kind.is_terminal) == 1
    for _ in range(50):
        if not await client.release_keys("stuck"):
            break
        await asyncio.sleep(0.1)
    assert await client.release_keys("stuck") == []
    # compensated once: the canary's share taken out, the canary removed, one end claimed
    # (the hung smoke run may end on the runner's own request timeout: not counted here)
    done = side_effects(counted)
    done.subtract(before)
    assert {key: n for key, n in done.items() if n and key[0] != "smoke"} == {
        ("watcher", "saga_request"): 1,
        ("puller", "spec_store"): 1,
        ("installer", "canary_install"): 1,
        ("local-backend", "runner_start"): 1,
        ("promoter", "route_write"): 2,  # the canary's share, then its removal
        ("installer", "canary_removal"): 1,
        ("installer", "terminal_claim"): 1,
    }, done


async def reach(client: Client, name: str, phase: str) -> None:
    """Return as soon as the status says ``phase``: follows every write, misses none."""

    async def watch() -> None:
        async for stored in client.store.watch_object("WorkflowRun", "default", name):
            if stored is not None and (stored.body.get("status") or {}).get("phase") == phase:
                return

    await asyncio.wait_for(watch(), timeout=60)


@pytest.mark.parametrize("phase", ["Pending", "Installing", "Smoking", "Ready"])
async def test_deleting_in_any_phase_cleans_up_and_removes_the_run(
    client: Client, registry: Path, silent_upstream: str, phase: str
) -> None:
    name = f"delete-in-{phase.lower()}"
    steps = [{"id": "hang", "tool": "http.request", "with": {"url": silent_upstream}}]
    publish_spec(registry, workflow_named(name, steps=steps if phase == "Smoking" else None))
    reached = asyncio.create_task(reach(client, name, phase))
    await asyncio.sleep(0.1)
    await client.apply(run_document(name, registry=registry))
    await reached
    await client.store.delete("WorkflowRun", "default", name)

    await client.wait_for(name, lambda body: body is None, what="to disappear", timeout_s=60)
    for _ in range(100):
        if not await client.release_keys(name):
            break
        await asyncio.sleep(0.1)
    assert await client.release_keys(name) == []
    events = await client.events(name)
    terminals = Counter(e.sagaid for e in events if e.event_type.is_terminal)
    assert all(count == 1 for count in terminals.values()), terminals
    assert EventType.RUN_REMOVED in [e.event_type for e in events]
