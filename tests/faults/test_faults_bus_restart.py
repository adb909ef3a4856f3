"""nats-server killed and restarted on the same store: nothing acknowledged is lost, every
service resumes consuming, and sagas in flight at the kill end once."""

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import ServiceUnavailableError
from stack_support import Client, delayed_endpoint, publish_spec, run_document, workflow_named
from test_faults_deadlines_and_deletes import reach

from plnt_cli.supervisor import Supervisor
from plnt_common import subjects
from plnt_common.events import EventType


async def test_a_saga_applied_across_a_server_restart_completes(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    publish_spec(registry, workflow_named("before-restart"))
    await client.apply(run_document("before-restart", registry=registry))
    await client.wait_phase("before-restart", "Ready")

    stack.restart_nats(kill=True)
    await asyncio.sleep(1.0)

    publish_spec(registry, workflow_named("after-restart"))
    await client.apply(run_document("after-restart", registry=registry))
    # services resume within seconds: pull consumers re-bind, KV watches restart
    await client.wait_phase("after-restart", "Ready", timeout_s=10)
    assert (await client.status("before-restart"))["phase"] == "Ready"


async def reconnected(client: Client, timeout_s: float = 20) -> None:
    """Until the test's own connection answers again (its reads time out meanwhile)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        try:
            await client.bus.js.stream_info(subjects.STREAM)
            return
        except (NatsTimeout, NoRespondersError, ServiceUnavailableError):
            assert asyncio.get_running_loop().time() < deadline, "the bus did not come back"
            await asyncio.sleep(0.1)


@pytest.fixture
async def slow_upstream() -> AsyncIterator[str]:
    """Answers after 400 ms: keeps a smoke step in flight across the restart."""
    async with delayed_endpoint(0.4) as url:
        yield url


async def test_sagas_in_flight_across_a_server_kill_each_end_ready_once(
    client: Client, registry: Path, stack: Supervisor, slow_upstream: str
) -> None:
    steps = [{"id": "slow", "tool": "http.request", "with": {"url": slow_upstream}}]
    publish_spec(registry, workflow_named("in-smoke", steps=steps))
    smoking = asyncio.create_task(reach(client, "in-smoke", "Smoking"))
    await asyncio.sleep(0.1)
    await client.apply(run_document("in-smoke", registry=registry, smoke_invocations=10))
    await smoking
    just_applied = ["in-flight-a", "in-flight-b"]
    for name in just_applied:
        publish_spec(registry, workflow_named(name))
        await client.apply(run_document(name, registry=registry))

    stack.restart_nats(kill=True)  # one saga mid-smoke, two at their first steps
    await reconnected(client)

    for name in ["in-smoke", *just_applied]:
        await client.wait_phase(name, "Ready", timeout_s=90)
        events = await client.events(name)
        terminals = Counter((e.sagaid, e.event_type) for e in events if e.event_type.is_terminal)
        assert terminals == {(f"default.{name}.1.1", EventType.RUN_READY): 1}, terminals
        verdicts = [e.event_type for e in events if e.event_type.value.startswith("smoke.")]
        assert verdicts == [EventType.SMOKE_PASSED], (name, verdicts)
        assert len(await client.observed_pids(name)) == 1, await client.release_keys(name)
