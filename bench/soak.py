"""Soak: many WorkflowRuns changing and going away while a chaos loop kills services and
restarts nats-server; then every promise of the saga is checked.

``python -m bench.soak --runs 200`` (``task soak``) prints a table: sagas, kills, restarts,
duplicates dropped, lost (must be 0), and the checks. A short version runs in the test
suite (tests/faults/test_faults_soak.py). ``--nats-cluster 3`` runs NATS as three nodes
with 3 replicas, and the chaos loop's server faults kill one node at a time.
"""

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from nats.errors import Error as NatsError

from plnt_cli.supervisor import SAGA_SERVICES, StackConfig, Supervisor
from plnt_cli.up import wait_until_ready
from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.history import read_events
from plnt_common.bus.kv_snapshot import kv_snapshot
from plnt_common.bus.replay import replay
from plnt_common.errors import BusUnavailable, Conflict, ResourceNotFound
from plnt_common.logs import configure_logging
from plnt_common.nats_server import free_ports
from plnt_common.releases import DESIRED_PREFIX, OBSERVED_PREFIX
from plnt_common.resource_store import ResourceStore
from plnt_common.resources import parse_resource
from plnt_testkit.cluster import wait_until_replicated
from plnt_testkit.projections import projection_change, stored_projections, watcher_caught_up

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
FINAL_PHASES = {"Ready", "RolledBack", "Failed"}
VERSIONS = ("1.0.0", "2.0.0", "3.0.0")
MIN_FAULTS = 4
FAULTS_WITHIN_S = 120.0
"""Longest the soak waits for every kind of fault after its last write."""
BROKEN = "3.0.0"
"""A version whose runner fails every call: its canary is rolled back."""
BROKEN_ENDS = {"RolledBack", "Failed"}
"""Where the broken version's saga may end: rolled back to a stable, or failed when the
run never had one (its first version was superseded before promotion)."""
KILLED_KINDS = (*SAGA_SERVICES, "local-backend")
"""Every kind of process the chaos loop SIGKILLs; each at least once before it stops."""
WRITE_RETRY_S = 60.0
"""How long an apply or delete is retried (a run mid-deletion, the server restarting)."""


@dataclass
class SoakReport:
    runs: int
    sagas: int = 0
    kills: int = 0
    nats_restarts: int = 0
    service_restarts: int = 0
    duplicates_dropped: int = 0
    lost: int = 0
    double_terminals: int = 0
    killed: Counter[str] = field(default_factory=Counter)
    """SIGKILLs by kind of process (``KILLED_KINDS``)."""
    write_retries: int = 0
    """Applies and deletes refused once and tried again (mid-deletion, server down)."""
    write_errors: list[str] = field(default_factory=list)
    """Applies and deletes that never went through: the run's last wish is unknown."""
    wrong_final_state: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    replay_mismatches: list[str] | None = None
    """What a replay of the stream changed, run by run (None: not compared yet)."""
    seconds: float = 0.0

    @property
    def replay_matches(self) -> bool:
        """Compared, and a replay changed no run's projection."""
        return self.replay_mismatches == []

    @property
    def ok(self) -> bool:
        return (
            self.lost == 0
            and self.double_terminals == 0
            and not self.write_errors
            and not self.wrong_final_state
            and not self.orphans
            and self.replay_matches
        )

    def table(self) -> str:
        rows = [
            ("WorkflowRuns", self.runs),
            ("sagas", self.sagas),
            (
                "services killed (SIGKILL)",
                f"{self.kills} ({', '.join(f'{k} {n}' for k, n in sorted(self.killed.items()))})",
            ),
            ("nats-server restarts (SIGKILL)", self.nats_restarts),
            ("service restarts by plnt up", self.service_restarts),
            ("duplicates dropped (Nats-Msg-Id)", self.duplicates_dropped),
            ("lost (sagas with no terminal event)", self.lost),
            ("sagas with two terminal events", self.double_terminals),
            ("applies and deletes retried", self.write_retries),
            ("applies and deletes that failed", len(self.write_errors)),
            ("runs not final for their last generation", len(self.wrong_final_state)),
            ("orphans (routes, releases, runner processes)", len(self.orphans)),
            (
                "projection equals replay",
                "yes"
                if self.replay_matches
                else f"NO: {', '.join(self.replay_mismatches or ['not compared'])}",
            ),
            ("seconds", f"{self.seconds:.1f}"),
        ]
        width = max(len(label) for label, _ in rows)
        return "\n".join(f"| {label:<{width}} | {value} |" for label, value in rows)


def write_registry(registry: Path, names: list[str]) -> None:
    spec = yaml.safe_load(
        (EXAMPLES / "registry" / "review-responder" / "1.2.0" / "workflow.yaml").read_text()
    )
    for name in names:
        for version in VERSIONS:
            document = json.loads(json.dumps(spec))
            document["metadata"] = {"name": name, "version": version}
            if version == BROKEN:
                document["spec"]["steps"] = [
                    {
                        "id": "call",
                        "tool": "http.request",
                        "with": {"url": "http://127.0.0.1:9/closed"},
                    }
                ]
            target = registry / name / version / "workflow.yaml"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(yaml.safe_dump(document))


def run_document(name: str, registry: Path, version: str, percent: int) -> dict[str, Any]:
    return {
        "apiVersion": "plnt.work/v1",
        "kind": "WorkflowRun",
        "metadata": {"name": name},
        "spec": {
            "workflow": {"ref": f"{name}@{version}", "registry": registry.as_uri()},
            "backend": {"cluster": "gpu-cluster-01", "gpuClass": "nvidia.com/h100"},
            "canary": {"trafficPercent": percent},
            "smokeTest": {"invocations": 2, "p95BudgetMs": 5000, "errorBudgetPercent": 0},
        },
    }


class Soak:
    def __init__(
        self,
        *,
        runs: int,
        seed: int,
        data_dir: Path,
        chaos_every_s: float,
        nats_cluster: int = 1,
    ) -> None:
        self.runs = runs
        self.random = random.Random(seed)
        self.data_dir = data_dir
        self.chaos_every_s = chaos_every_s
        self.report = SoakReport(runs=runs)
        # with --nats-cluster, the chaos loop SIGKILLs one node at a time and plnt up's
        # supervisor starts it again, as it would for a laptop's single nats-server
        nats_port, router_port, *peer_ports = free_ports(1 + nats_cluster)
        self.config = StackConfig(
            data_dir=data_dir,
            nats_port=nats_port,
            router_port=router_port,
            nats_peer_ports=tuple(peer_ports),
            extra_env={"PLNT_INSTALLER_READY_TIMEOUT_S": "60", "PLNT_LOG_LEVEL": "info"},
        )
        self.supervisor = Supervisor(self.config, say=lambda line: None)
        self.deleted: set[str] = set()
        self.ticks = 0
        self.history: dict[str, list[str]] = {}

    async def run(self) -> SoakReport:
        started = time.monotonic()
        self.supervisor.start()
        try:
            await wait_until_ready(self.config)
            bus = await Bus.open(self.config.nats_url, service="soak", wait_for_server=True)
            try:
                await self._drive(bus)
                if len(self.supervisor.nats_nodes()) > 1:
                    # the chaos is over: read once the last node killed is back and caught up
                    await wait_until_replicated(bus.js, timeout_s=120)
                await self._settle(bus)
                await self._check(bus)
            finally:
                await bus.close()
        finally:
            self.supervisor.stop()
        self.report.service_restarts = sum(s.restarts for s in self.supervisor.services())
        self.report.duplicates_dropped = self._count_log_events("bus.duplicate_dropped")
        self.report.seconds = time.monotonic() - started
        return self.report

    async def _drive(self, bus: Bus) -> None:
        store = ResourceStore(bus)
        registry = self.data_dir / "registry"
        names = [f"soak-{i}" for i in range(self.runs)]
        write_registry(registry, names)
        await store.apply(
            parse_resource(yaml.safe_load((EXAMPLES / "backend-local.yaml").read_text()))
        )
        self.ticks = 0
        self.enough_faults = asyncio.Event()
        chaos = asyncio.create_task(self._chaos())
        try:
            for name in names:  # every run starts, in small bursts
                await self._apply(store, name, registry, "1.0.0", 10)
                if self.random.random() < 0.1:
                    await asyncio.sleep(0.2)
            for _ in range(self.runs):  # then random spec changes and deletions
                name = self.random.choice(names)
                if name in self.deleted:
                    continue
                if self.random.random() < 0.15:
                    await self._delete(store, name)
                else:
                    version = self.random.choice(VERSIONS)
                    percent = self.random.choice((5, 10, 20, 50))
                    await self._apply(store, name, registry, version, percent)
                await asyncio.sleep(self.random.uniform(0.05, 0.25))
            # a short soak still sees a server restart and every kind killed; bounded, so a
            # kind that is never found to kill shows in the report instead of hanging
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.enough_faults.wait(), timeout=FAULTS_WITHIN_S)
        finally:
            chaos.cancel()

    async def _apply(
        self, store: ResourceStore, name: str, registry: Path, version: str, percent: int
    ) -> None:
        document = parse_resource(run_document(name, registry, version, percent))
        await self._write(f"apply {name}@{version}", lambda: store.apply(document))

    async def _delete(self, store: ResourceStore, name: str) -> None:
        async def delete() -> None:
            with contextlib.suppress(ResourceNotFound):  # gone already
                await store.delete("WorkflowRun", "default", name)

        if await self._write(f"delete {name}", delete):
            self.deleted.add(name)

    async def _write(self, what: str, write: Callable[[], Awaitable[object]]) -> bool:
        """Retry ``write`` (idempotent) through refusals for ``WRITE_RETRY_S``; a write that
        never goes through is recorded and fails the soak. True once it went through."""
        deadline = time.monotonic() + WRITE_RETRY_S
        while True:
            try:
                await write()
                return True
            except (Conflict, BusUnavailable, NatsError, TimeoutError) as exc:
                # mid-deletion (Conflict), or the server restarting under chaos
                if time.monotonic() >= deadline:
                    self.report.write_errors.append(f"{what}: {exc!r}")
                    return False
                self.report.write_retries += 1
                await asyncio.sleep(0.1)

    async def _chaos(self) -> None:
        while True:
            await asyncio.sleep(self.chaos_every_s)
            self.ticks += 1
            every_kind = all(self.report.killed[kind] for kind in KILLED_KINDS)
            if self.ticks >= MIN_FAULTS and every_kind and self.report.nats_restarts:
                self.enough_faults.set()
            if self.ticks % 4 == 2:  # every fourth fault takes the server down, the rest a service
                if self._kill_nats():
                    self.report.nats_restarts += 1
                continue
            processes = [*self.supervisor.services(), *self.supervisor.local_backends().values()]
            candidates = [
                s for s in processes if s.process is not None and kind_of(s.name) in KILLED_KINDS
            ]
            if candidates:
                # the least killed kind first: a short soak still kills every kind
                fewest = min(self.report.killed[kind_of(s.name)] for s in candidates)
                victim = self.random.choice(
                    [s for s in candidates if self.report.killed[kind_of(s.name)] == fewest]
                )
                try:
                    os.kill(victim.pid, signal.SIGKILL)
                    self.report.kills += 1
                    self.report.killed[kind_of(victim.name)] += 1
                except ProcessLookupError:
                    pass

    def _kill_nats(self) -> bool:
        """One node SIGKILLed, left to plnt up to restart; a single server is restarted here.

        False when a node is still restarting: a second one down would take the cluster's
        quorum away, which 3 replicas are not meant to survive."""
        nodes = self.supervisor.nats_nodes()
        if len(nodes) == 1:
            self.supervisor.restart_nats(kill=True)
            return True
        if any(node.process is None for node in nodes):
            return False
        victim = self.random.choice(nodes)
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim.pid, signal.SIGKILL)
        return True

    async def _settle(self, bus: Bus, timeout_s: float = 600) -> None:
        """Wait until every run is final for its last generation and deleted runs are gone."""
        store = ResourceStore(bus)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pending = []
            for stored in await store.list("WorkflowRun", "default"):
                status = stored.body.get("status") or {}
                generation = stored.body["metadata"]["generation"]
                deleting = bool(stored.body["metadata"].get("deletionTimestamp"))
                if (
                    deleting
                    or status.get("phase") not in FINAL_PHASES
                    or status.get("observedGeneration") != generation
                ):
                    pending.append(stored.body["metadata"]["name"])
            if not pending and not await self._sagas_without_terminal(bus):
                await asyncio.sleep(2)  # let trailing retirements finish
                return
            await asyncio.sleep(0.5)
        self.report.wrong_final_state.extend(pending)

    async def _sagas_without_terminal(self, bus: Bus) -> list[str]:
        ended: set[str] = set()
        seen: set[str] = set()
        async for stored in read_events(bus.nc):
            if stored.event is not None:
                seen.add(stored.event.sagaid)
                if stored.event.event_type.is_terminal:
                    ended.add(stored.event.sagaid)
        return sorted(seen - ended)

    async def _check(self, bus: Bus) -> None:
        store = ResourceStore(bus)
        alive = {
            o.body["metadata"]["name"]: o.body for o in await store.list("WorkflowRun", "default")
        }
        for name in self.deleted:
            if name in alive:
                self.report.wrong_final_state.append(f"{name} (deleted, still there)")
        for name, body in alive.items():
            status = body.get("status") or {}
            version = body["spec"]["workflow"]["ref"].split("@")[1]
            generation = body["metadata"]["generation"]
            phase, revision = status.get("phase"), status.get("revision")
            # the last generation's saga is never superseded: it ends where its version must
            if version == BROKEN:
                if phase not in BROKEN_ENDS:
                    self.report.wrong_final_state.append(f"{name} broken version ends {phase}")
            elif (phase, revision) != ("Ready", f"{version}-g{generation}"):
                self.report.wrong_final_state.append(
                    f"{name} {version} (generation {generation}) ends {phase} on {revision!r}"
                )
        terminals: Counter[str] = Counter()
        sagas: set[str] = set()
        self.history = {}
        async for stored in read_events(bus.nc):
            if stored.event is None:
                continue
            sagas.add(stored.event.sagaid)
            self.history.setdefault(stored.event.sagaid, []).append(stored.event.event_type.value)
            if stored.event.event_type.is_terminal:
                terminals[stored.event.sagaid] += 1
        self.report.sagas = len(sagas)
        lost = sorted(s for s in sagas if terminals[s] == 0)
        self.report.lost = len(lost)
        self.report.wrong_final_state.extend(f"saga {s} has no terminal event" for s in lost)
        self.report.double_terminals = len([s for s in sagas if terminals[s] > 1])
        await self._find_orphans(bus, set(alive))
        await watcher_caught_up(bus.js)  # else a projection may just lag the stream
        before = await stored_projections(bus.nc)
        await replay(bus)
        after = await stored_projections(bus.nc)
        self.report.replay_mismatches = [
            projection_change(key, before.get(key), after.get(key))
            for key in sorted(before.keys() | after.keys())
            if before.get(key) != after.get(key)
        ]

    async def _find_orphans(self, bus: Bus, alive: set[str]) -> None:
        """Routes, release records and runner processes of runs no longer alive."""
        for key in await keys(bus, subjects.ROUTES_BUCKET):
            if key.split(".", 1)[1] not in alive:
                self.report.orphans.append(f"route {key}")
        releases = await keys(bus, subjects.RELEASES_BUCKET)
        for key in releases:
            prefix, _, release = key.split(".", 2)
            if prefix in (DESIRED_PREFIX, OBSERVED_PREFIX) and _run_of(release) not in alive:
                self.report.orphans.append(f"release {key}")
        release_dirs = self.supervisor.local_backend_root.glob("*/releases/default/*")
        for release_dir in release_dirs:
            pid_file = release_dir / "runner.pid"
            if not pid_file.exists() or _run_of(release_dir.name) in alive:
                continue
            if process_alive(int(pid_file.read_text().split()[0])):
                self.report.orphans.append(f"runner process {release_dir.name}")
        for name in alive:  # at most a stable and one canary per run, and only known ones
            mine = [
                k for k in releases if k.startswith(f"{DESIRED_PREFIX}.default.default-{name}-g")
            ]
            if len(mine) > 2:
                self.report.orphans.append(f"{name}: {len(mine)} releases")

    def _count_log_events(self, event: str) -> int:
        count = 0
        for log in (self.data_dir / "logs").glob("*.log"):
            count += sum(
                1 for line in log.read_text(errors="replace").splitlines() if f'"{event}"' in line
            )
        return count


def kind_of(process_name: str) -> str:
    """``installer-2`` -> ``installer``; ``local-backend-<backend>`` -> ``local-backend``."""
    if process_name.startswith("local-backend"):
        return "local-backend"
    return process_name if process_name in KILLED_KINDS else process_name.rsplit("-", 1)[0]


def process_alive(pid: int) -> bool:
    """A live process, not a zombie waiting for its parent (a left pid file alone is no orphan)."""
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (ProcessLookupError, OSError):
        return False


async def keys(bus: Bus, bucket: str) -> list[str]:
    # not nats-py's KeyValue.keys(): its listing can end before what it lists (kv_snapshot)
    return list(await kv_snapshot(bus.nc, bucket))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.soak")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--chaos-every", type=float, default=2.0, help="seconds between faults")
    parser.add_argument(
        "--nats-cluster",
        type=int,
        choices=(1, 3, 5),
        default=1,
        help="NATS nodes (3: a cluster with 3 replicas; the chaos loop kills one node)",
    )
    args = parser.parse_args()
    configure_logging(level="warning", fmt="console")
    with tempfile.TemporaryDirectory(prefix="plnt-soak-") as tmp:
        soak = Soak(
            runs=args.runs,
            seed=args.seed,
            data_dir=Path(tmp),
            chaos_every_s=args.chaos_every,
            nats_cluster=args.nats_cluster,
        )
        report = asyncio.run(soak.run())
    print(report.table())
    for problem in report.wrong_final_state + report.orphans:
        print(f"  problem: {problem}")
    for saga, kinds in soak.history.items():
        if not any(
            k in ("run.ready", "run.rolled_back", "run.failed", "run.removed") for k in kinds
        ):
            print(f"  {saga}: {' → '.join(kinds)}")
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()


def _run_of(release: str) -> str:
    """The soak's run of a release ``default-<run>-g<generation>`` (its names are short,
    so never hashed)."""
    return release.rsplit("-g", 1)[0].removeprefix("default-")
