"""Two replicas of every saga service share one durable consumer each: no saga runs twice.

Counted on the side effects themselves (the processes' counters), not on the events: a
step that ran twice publishes an event the stream's duplicate window drops.
"""

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from side_effects import counting_env, side_effects, step_runs
from stack_fixtures import start_stack
from stack_support import Client, backend_document, publish_spec, run_document, workflow_named

from plnt_cli.supervisor import Supervisor
from plnt_common.bus.bus import Bus
from plnt_common.events import EventType

RUNS = 50
# the burst's own wait for Ready is 240 s: the suite's 120 s would end the whole run first
# (pytest-timeout's thread method) on a slow machine
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def counted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("replica-metrics")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, counted: Path) -> Iterator[Supervisor]:
    data_dir = tmp_path_factory.mktemp("replicas")
    supervisor = start_stack(data_dir, replicas=2, env=counting_env(counted))
    yield supervisor
    supervisor.stop()


@pytest.fixture
async def client(stack: Supervisor) -> AsyncIterator[Client]:
    bus = await Bus.open(stack.config.nats_url, service="test", wait_for_server=True)
    test_client = Client(bus)
    await test_client.apply(backend_document())
    yield test_client
    await bus.close()


async def test_a_burst_on_two_replicas_ends_each_saga_once_with_one_install(
    client: Client, registry: Path, stack: Supervisor, counted: Path
) -> None:
    assert Counter(p.name.rsplit("-", 1)[0] for p in stack.services())["installer"] == 2
    names = [f"burst-{i}" for i in range(RUNS)]
    for name in names:
        publish_spec(registry, workflow_named(name))
    await asyncio.gather(*(client.apply(run_document(name, registry=registry)) for name in names))
    await asyncio.gather(*(client.wait_phase(name, "Ready", timeout_s=240) for name in names))

    for name in names:
        events = await client.events(name)
        kinds = Counter(e.event_type for e in events)
        assert kinds[EventType.RUN_READY] == 1, (name, kinds)
        assert kinds[EventType.CANARY_INSTALLED] == 1, (name, kinds)
        assert sum(n for kind, n in kinds.items() if kind.is_terminal) == 1
        assert len(await client.observed_pids(name)) == 1, (name, await client.release_keys(name))

    effects = side_effects(counted)
    # Embedded watchers elect no leader: both may request a saga, and the duplicate
    # window keeps one run.requested (the puller's single run per saga shows it).
    requests = effects.pop(("watcher", "saga_request"))
    assert RUNS <= requests <= 2 * RUNS, requests
    assert effects == {
        ("puller", "spec_store"): RUNS,
        ("installer", "canary_install"): RUNS,
        ("local-backend", "runner_start"): RUNS,
        ("smoke", "smoke_run"): RUNS,
        ("promoter", "route_write"): 2 * RUNS,  # the canary's share, then the promotion
        ("promoter", "terminal_claim"): RUNS,
        # and no ("promoter", "route_follow"): no runner restarted, so no follower wrote
    }, effects
    runs = step_runs(counted)
    for step in (
        ("puller", "run.requested"),
        ("installer", "spec.pulled"),
        ("smoke", "canary.installed"),
        ("promoter", "canary.installed"),
        ("promoter", "smoke.passed"),
    ):
        assert runs[step] == RUNS, (step, runs)
