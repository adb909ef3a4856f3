"""End to end on Kubernetes: the real plnt stack, its two watchers on the API emulator.

WorkflowRuns are created and deleted through the Kubernetes API; the PlntBackend stays
in the embedded store, where the puller reads backends. Both watcher replicas find the
API through KUBECONFIG (standard resolution); one holds the Lease and watches.
"""

import asyncio
import json
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_support import GROUP, RUNS, VERSION
from kubernetes import client, config
from side_effects import (
    MULTIPROCESS_DIR_ENV,
    ONE_READY_SAGA,
    counting_env,
    side_effects,
    side_effects_since,
)
from stack_fixtures import start_stack
from stack_support import (
    EXAMPLES,
    Client,
    backend_document,
    invoke,
    publish_spec,
    run_document,
    workflow_named,
)

from plnt_cli.supervisor import Supervisor
from plnt_common.bus.bus import Bus
from plnt_common.events import EventType
from plnt_testkit.kube_emulator import EVENTS, LEASES, KubeEmulator

KUBE_ENV = {
    "PLNT_WATCHER_SOURCE": "kubernetes",
    "PLNT_WATCHER_LEASE_DURATION_S": "4",
    "PLNT_WATCHER_LEASE_RENEW_DEADLINE_S": "3",
    "PLNT_WATCHER_LEASE_RETRY_PERIOD_S": "0.5",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeEmulator, Path]]:
    with KubeEmulator(bookmark_interval_s=1.0) as emulator:
        yield emulator, emulator.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")


@pytest.fixture(scope="module")
def stack(
    cluster: tuple[KubeEmulator, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Supervisor]:
    # KUBECONFIG, not PLNT_WATCHER_KUBECONFIG: the watchers resolve it the standard way.
    env = {
        **KUBE_ENV,
        "KUBECONFIG": str(cluster[1]),
        **counting_env(tmp_path_factory.mktemp("kube-metrics")),
    }
    supervisor = start_stack(tmp_path_factory.mktemp("kube-stack"), replicas=2, env=env)
    yield supervisor
    supervisor.stop()


@pytest.fixture
async def bus_client(stack: Supervisor) -> AsyncIterator[Client]:
    bus = await Bus.open(stack.config.nats_url, service="test", wait_for_server=True)
    test_client = Client(bus)
    await test_client.apply(backend_document())  # the puller reads backends from here
    yield test_client
    await bus.close()


@pytest.fixture
def objects(cluster: tuple[KubeEmulator, Path]) -> Iterator[client.CustomObjectsApi]:
    api = config.new_client_from_config(config_file=str(cluster[1]))
    yield client.CustomObjectsApi(api)
    api.close()


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    path = tmp_path / "registry"
    path.mkdir()
    return path


async def read_run(objects: client.CustomObjectsApi, name: str) -> dict[str, Any] | None:
    try:
        body: dict[str, Any] = await asyncio.to_thread(
            objects.get_namespaced_custom_object, GROUP, VERSION, "default", RUNS, name
        )
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return body


async def wait_run(
    objects: client.CustomObjectsApi,
    name: str,
    check: Callable[[dict[str, Any] | None], bool],
    *,
    timeout_s: float = 90,
) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout_s
    body = None
    while time.monotonic() < deadline:
        body = await read_run(objects, name)
        if check(body):
            return body
        await asyncio.sleep(0.2)
    raise AssertionError(f"{name} did not get there; last seen: {body}")


def ready(body: dict[str, Any] | None) -> bool:
    status = (body or {}).get("status") or {}
    return bool(
        body
        and status.get("phase") == "Ready"
        and status.get("observedGeneration") == body["metadata"]["generation"]
    )


async def create(objects: client.CustomObjectsApi, registry: Path, name: str) -> None:
    publish_spec(registry, workflow_named(name))
    await asyncio.to_thread(
        objects.create_namespaced_custom_object,
        GROUP,
        VERSION,
        "default",
        RUNS,
        run_document(name, registry=registry),
    )


def watcher_identities(stack: Supervisor) -> dict[str, str]:
    """Lease identity (<hostname>-<pid>) -> supervisor label, for every watcher."""
    host = socket.gethostname()
    return {f"{host}-{p.pid}": p.name for p in stack.services() if p.name.startswith("watcher")}


async def test_a_run_created_through_the_api_gets_ready_and_its_deletion_cleans_up(
    stack: Supervisor,
    cluster: tuple[KubeEmulator, Path],
    bus_client: Client,
    objects: client.CustomObjectsApi,
    registry: Path,
) -> None:
    emulator, _ = cluster
    counted = Path(stack.config.extra_env[MULTIPROCESS_DIR_ENV])
    before = side_effects(counted)
    await create(objects, registry, "kube-one")

    body = await wait_run(objects, "kube-one", ready)
    assert body is not None
    assert body["metadata"]["finalizers"] == ["plnt.work/saga"]
    assert body["status"]["endpoint"].endswith("/workflows/kube-one/invoke")
    payload = json.loads((EXAMPLES / "invoke.json").read_text())
    code, revision, answer = await invoke(body["status"]["endpoint"], payload)
    assert (code, revision) == (200, "1.0.0-g1")
    assert answer["output"]["reply"]

    reasons = [
        e["reason"]
        for e in emulator.objects(EVENTS, "default")
        if e["involvedObject"]["name"] == "kube-one"
    ]
    # One Event per phase change, in the saga's order, ending Ready. A phase that stood
    # for less than the watcher's status linger (Pending, on a busy machine) is folded
    # into the next write and has no Event of its own.
    order = ["Pending", "Pulling", "Installing", "Smoking", "Promoting", "Ready"]
    assert reasons and reasons[-1] == "Ready", reasons
    assert [order.index(r) for r in reasons] == sorted({order.index(r) for r in reasons}), reasons

    await asyncio.to_thread(
        objects.delete_namespaced_custom_object, GROUP, VERSION, "default", RUNS, "kube-one"
    )
    await wait_run(objects, "kube-one", lambda b: b is None, timeout_s=60)

    kinds = Counter(e.event_type for e in await bus_client.events("kube-one"))
    assert kinds[EventType.RUN_DELETED] == 1 and kinds[EventType.RUN_REMOVED] == 1
    assert await bus_client.release_keys("kube-one") == []
    # Each side effect once, on two replicas of every service (the events alone cannot
    # show a step that ran twice: the duplicate window drops its second event).
    removed = ("installer", "terminal_claim")  # run.removed ends the deletion's saga
    assert side_effects_since(counted, before) == {**ONE_READY_SAGA, removed: 1}


async def test_two_watchers_elect_one_leader_and_start_each_saga_once(
    stack: Supervisor,
    cluster: tuple[KubeEmulator, Path],
    bus_client: Client,
    objects: client.CustomObjectsApi,
    registry: Path,
) -> None:
    emulator, _ = cluster
    watchers = watcher_identities(stack)
    assert len(watchers) == 2

    names = [f"kube-burst-{i}" for i in range(4)]
    counted = Path(stack.config.extra_env[MULTIPROCESS_DIR_ENV])
    before = side_effects(counted)
    await asyncio.gather(*(create(objects, registry, name) for name in names))
    await asyncio.gather(*(wait_run(objects, name, ready, timeout_s=60) for name in names))

    lease = emulator.objects(LEASES, "default")[0]
    leader = lease["spec"]["holderIdentity"]
    assert leader in watchers, (leader, watchers)
    # Only the leader watches WorkflowRuns; the follower only folds events and writes status.
    assert emulator.open_watches(RUNS) == [f"plnt-watcher/{leader}"]
    elected = [
        label
        for label in watchers.values()
        if "leader.elected" in (stack.log_dir / f"{label}.log").read_text()
    ]
    assert elected == [watchers[leader]]
    # each saga requested by one watcher once (a second request would be dropped by the
    # duplicate window, so the events alone cannot show it), and installed once
    done = side_effects(counted)
    done.subtract(before)
    assert done[("watcher", "saga_request")] == len(names), done
    assert done[("installer", "canary_install")] == len(names), done
    for name in names:
        kinds = Counter(e.event_type for e in await bus_client.events(name))
        assert kinds[EventType.RUN_REQUESTED] == 1, (name, kinds)
        assert kinds[EventType.RUN_READY] == 1, (name, kinds)
        assert sum(n for kind, n in kinds.items() if kind.is_terminal) == 1


# 12 s by default: longer than the saga consumer's own redeliveries (~9 s), which alone
# would ride out a shorter outage; 30 s, the figure, in the slow soak
@pytest.mark.parametrize(
    "outage_s",
    [pytest.param(12.0, id="12s"), pytest.param(30.0, id="30s", marks=pytest.mark.slow)],
)
async def test_a_run_whose_status_writes_are_refused_for_a_while_still_shows_ready(
    outage_s: float,
    stack: Supervisor,
    cluster: tuple[KubeEmulator, Path],
    bus_client: Client,
    objects: client.CustomObjectsApi,
    registry: Path,
) -> None:
    """The API server refuses every status write of the run (a control-plane upgrade)
    while its saga runs, then recovers: the run shows Ready, no watcher restarted."""
    emulator, _ = cluster
    name = f"outage-{int(outage_s)}"
    watchers = {p.name: p.pid for p in stack.services() if p.name.startswith("watcher")}
    emulator.refuse_status_writes(code=503, seconds=outage_s, name=name)
    started = time.monotonic()
    await create(objects, registry, name)

    await wait_run(objects, name, ready, timeout_s=outage_s + 60)

    assert time.monotonic() - started >= outage_s
    assert emulator.requests("PUT", f"/workflowruns/{name}/status") > 1
    assert {p.name: p.pid for p in stack.services() if p.name.startswith("watcher")} == watchers
