"""SIGKILL inside a saga step, at every fault point of every service, on the real stack.

Every point of a case is armed (``PLNT_FAULT_PAUSE``): the first handler to reach it
parks and reports its pid, and the test kills that process at once. Enough runs go
through together that every point is reached (the test checks that each one parked).
Unacked messages come back after the consumers' ack wait (2 s here, 30 s normally), to
the restarted process or, with two replicas of every saga service, to the other one;
the services are restarted by the supervisor as under ``plnt up``. Cases: one replica
and every point; two replicas and the points where a second replica can redo a step
(every point on two replicas under ``-m slow``).

What "once" means, counted on the processes' own counters (summed over every process,
killed ones included):
- exactly once: the terminal event (one per saga in the stream), the runner start (a
  restarted local-backend adopts the runner it started), the two route writes per run
  (a redelivered promotion finds the route already promoted), counted by the routes
  bucket itself: a counter bumped after the server's answer misses an effect whose
  process died waiting for that answer, so the counters of awaited effects are bounds;
- legitimately repeated after a crash, so at least once, with the outcome asserted:
  the canary install (records the same desired release again: one release, one runner
  process per run) and the smoke run (read-only calls to the canary).
"""

import asyncio
import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from side_effects import counting_env, side_effects
from stack_fixtures import start_stack
from stack_support import BACKEND, Client, invoke, publish_spec, run_document, workflow_named

from plnt_cli.supervisor import Supervisor
from plnt_common import subjects
from plnt_common.events import EventType
from plnt_common.releases import release_name
from plnt_common.routes import RouteEntry

POINTS = (
    "watcher:run.requested:after_effect",
    "watcher:canary.installed:before_ack",
    "puller:run.requested:after_effect",
    "puller:run.requested:before_ack",
    "installer:spec.pulled:after_effect",
    "installer:spec.pulled:before_ack",
    "local-backend:runner:after_effect",
    "smoke:canary.installed:after_effect",
    "smoke:canary.installed:before_ack",
    "promoter:canary.installed:before_ack",
    "promoter:smoke.passed:after_effect",
    "promoter:smoke.passed:before_ack",
)
REDONE_BY_A_REPLICA = (
    "puller:run.requested:after_effect",
    "installer:spec.pulled:after_effect",
    "local-backend:runner:after_effect",
    "smoke:canary.installed:after_effect",
    "promoter:canary.installed:before_ack",
    "promoter:smoke.passed:after_effect",
    "promoter:smoke.passed:before_ack",
)
"""A step killed after its side effect, or before its ack, whose message the other
replica may take: each effect must still happen once, and a terminal published before
the kill is not published again."""


@dataclass(frozen=True)
class Case:
    replicas: int
    points: tuple[str, ...]
    runs: int  # enough that every point is reached while runs are in flight


CASES = [
    pytest.param(Case(1, POINTS, 14), id="one-replica-every-point"),
    pytest.param(Case(2, REDONE_BY_A_REPLICA, 9), id="two-replicas"),
    pytest.param(Case(2, POINTS, 14), id="two-replicas-every-point", marks=pytest.mark.slow),
]


@pytest.fixture(scope="module", params=CASES)
def case(request: pytest.FixtureRequest) -> Case:
    found: Case = request.param
    return found


@pytest.fixture(scope="module")
def fault_dirs(tmp_path_factory: pytest.TempPathFactory, case: Case) -> tuple[Path, Path]:
    """(where parked steps report, where the processes keep their counters)."""
    return tmp_path_factory.mktemp("parked"), tmp_path_factory.mktemp("crash-metrics")


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, fault_dirs: tuple[Path, Path], case: Case
) -> Iterator[Supervisor]:
    parked, counted = fault_dirs
    env = {
        **counting_env(counted),
        "PLNT_FAULT_PAUSE": ",".join(case.points),
        "PLNT_FAULT_REPORT_DIR": str(parked),
        "PLNT_FAULT_ACK_WAIT_S": "2",
        # kills and restarts under load must not let a deadline end a saga first
        "PLNT_WATCHER_DEADLINE_PROMOTING_S": "300",
    }
    supervisor = start_stack(tmp_path_factory.mktemp("crash"), replicas=case.replicas, env=env)
    yield supervisor
    supervisor.stop()


async def kill_every_parked_step(
    parked: Path, stop: asyncio.Event, expected: set[str]
) -> dict[str, int]:
    """SIGKILL each process the moment it reports a parked step; {point: pid}. Runs until
    every expected point was killed, or ``stop``."""
    killed: dict[str, int] = {}
    while not stop.is_set() and set(killed) != expected:
        # a marker appears whole; a hidden file is a report still being written
        markers = await asyncio.to_thread(lambda: list(parked.glob("[!.]*")))
        for marker in markers:
            if marker.name in killed:
                continue
            killed[marker.name] = int(marker.read_text())
            # a process parked at two points at once is killed for the first it reported
            with contextlib.suppress(ProcessLookupError):
                os.kill(killed[marker.name], signal.SIGKILL)
        await asyncio.sleep(0.05)
    return killed


@pytest.mark.timeout(300)
async def test_sigkill_at_every_fault_point_ends_every_saga_once_with_each_side_effect_once(
    client: Client, registry: Path, stack: Supervisor, fault_dirs: tuple[Path, Path], case: Case
) -> None:
    parked, counted = fault_dirs
    runs = case.runs
    names = [f"crash-{i}" for i in range(runs)]
    for name in names:
        publish_spec(registry, workflow_named(name))
    stop = asyncio.Event()
    expected = {p.replace(":", ".") for p in case.points}
    killer = asyncio.create_task(kill_every_parked_step(parked, stop, expected))
    started = time.monotonic()
    await asyncio.gather(*(client.apply(run_document(name, registry=registry)) for name in names))
    try:
        await asyncio.gather(*(client.wait_phase(n, "Ready", timeout_s=150) for n in names))
        # a step parked before its ack has published its outcome: the last run can be
        # Ready while its step parks, so the killer gets a moment to see every point
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(killer), 10)
    finally:
        stop.set()
        killed = await killer
    print(f"all {runs} runs Ready {time.monotonic() - started:.0f}s after apply")

    assert sorted(killed) == sorted(expected)
    for service in {p.split(":")[0] for p in case.points}:
        # one process per service, or its replicas "<service>-1", "<service>-2"
        replicas = [
            s
            for s in stack.services()
            if s.name.rsplit("-", 1)[0] == service or s.name in (service, f"{service}-{BACKEND}")
        ]
        assert len(replicas) == (1 if service == "local-backend" else case.replicas), service
        assert sum(s.restarts for s in replicas) >= 1, service

    effects = side_effects(counted)
    # No await lies between starting a runner and counting it: exact.
    assert effects[("local-backend", "runner_start")] == runs, effects
    # Counted once the server confirmed the effect: a process killed while awaiting that
    # answer did the effect uncounted, so these may fall short, never exceed.
    assert effects[("promoter", "terminal_claim")] <= runs, effects
    assert effects[("puller", "spec_store")] <= runs, effects
    assert effects[("promoter", "route_write")] <= 2 * runs, effects
    # The bucket counts every write that happened, crash or not: two per run.
    routes = await client.bus.js.stream_info(f"KV_{subjects.ROUTES_BUCKET}")
    assert routes.state.last_seq == 2 * runs, routes.state
    # Repeated by a redelivery after a crash (the last delivery's always counts).
    assert effects[("installer", "canary_install")] >= runs, effects
    assert effects[("smoke", "smoke_run")] >= runs, effects

    for name in names:
        events = await client.events(name)
        terminals = Counter((e.sagaid, e.event_type) for e in events if e.event_type.is_terminal)
        assert terminals == {(f"default.{name}.1.1", EventType.RUN_READY): 1}, (name, terminals)
        assert await client.release_keys(name) == [
            f"desired.default.{release_name('default', name, 1)}",
            f"observed.default.{release_name('default', name, 1)}",
        ]
        pids = await client.observed_pids(name)
        assert len(pids) == 1 and os.kill(pids[0], 0) is None, (name, pids)
        entry = await client.bus.routes.get(f"default.{name}")
        route = RouteEntry.model_validate_json(entry.value or b"{}")
        assert route.stable is not None and route.stable.revision == "1.0.0-g1", route
        assert route.canary is None, route
    body = await client.wait_phase(names[0], "Ready")
    code, revision, _ = await invoke(body["status"]["endpoint"], {"review": "fine"})
    assert (code, revision) == (200, "1.0.0-g1")
