"""The console on Kubernetes (PLNT_CONSOLE_SOURCE=kubernetes): its buttons get the
WorkflowRun from the API (the test kit's emulator) and merge-patch the operation's
annotation there, then wait on the run's projection in ``plnt-runs``; with the real
watcher on the emulator the run reaches the outcome phase. Errors are one message."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from console_support import Console, running_console
from kubernetes import client, config

from plnt_common.bus.bus import Bus
from plnt_common.events import Envelope, EventType, RunReady, follow_up
from plnt_common.kube import api_client
from plnt_common.projection import RunProjection, run_key
from plnt_common.resource_store import ResourceStore
from plnt_common.resources import WorkflowRunStatus
from plnt_common.status import Phase
from plnt_common.subjects import event_subject
from plnt_console.adapters.kube_runs import KubernetesRuns
from plnt_testkit.kube_emulator import KubeEmulator
from plnt_watcher.app import run as run_watcher
from plnt_watcher.settings import WatcherSettings

GROUP, VERSION, RUNS = "plnt.work", "v1", "workflowruns"
WAIT_S = 10.0


@pytest.fixture
def emulator() -> Iterator[KubeEmulator]:
    with KubeEmulator(bookmark_interval_s=0.2) as server:
        yield server


@pytest.fixture
def kubeconfig(emulator: KubeEmulator, tmp_path: Path) -> Path:
    return emulator.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def objects(kubeconfig: Path) -> Iterator[client.CustomObjectsApi]:
    api = config.new_client_from_config(config_file=str(kubeconfig))
    yield client.CustomObjectsApi(api)
    api.close()


@pytest.fixture
async def kube_console(nats_url: str, kubeconfig: Path) -> AsyncIterator[Console]:
    """The console in Kubernetes mode, as ``serve`` wires it, on the emulator."""
    api = api_client(kubeconfig=str(kubeconfig), user_agent="plnt-console/test")

    def on_kubernetes(bus: Bus) -> KubernetesRuns:
        return KubernetesRuns(api=api, runs_bucket=bus.runs, request_timeout_s=5)

    async with running_console(nats_url, runs=on_kubernetes) as running:
        yield running
    api.close()


@pytest.fixture
async def watcher(nats_url: str, kubeconfig: Path) -> AsyncIterator[None]:
    """The whole watcher (resource loop, fold, status writes) on the emulator."""
    settings = WatcherSettings(
        nats_url=nats_url,
        source="kubernetes",
        kubeconfig=str(kubeconfig),
        leader_election=False,
        kube_events=False,
        kube_request_timeout_s=5,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(run_watcher(settings, stop))
    yield
    stop.set()
    with contextlib.suppress(asyncio.CancelledError, TimeoutError):
        await asyncio.wait_for(task, timeout=10)


def create_run(objects: client.CustomObjectsApi, name: str) -> dict[str, Any]:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "WorkflowRun",
        "metadata": {"name": name},
        "spec": {
            "workflow": {"ref": "demo@1.0.0", "registry": "file:///tmp/registry"},
            "backend": {"cluster": "local"},
        },
    }
    created: dict[str, Any] = objects.create_namespaced_custom_object(
        GROUP, VERSION, "default", RUNS, body
    )
    return created


def get_run(objects: client.CustomObjectsApi, name: str) -> dict[str, Any]:
    found: dict[str, Any] = objects.get_namespaced_custom_object(
        GROUP, VERSION, "default", RUNS, name
    )
    return found


def paused(name: str) -> RunProjection:
    """The run's projection as the watcher's fold leaves it at the manual gate."""
    return RunProjection(
        namespace="default",
        name=name,
        saga_id=f"default.{name}.1.1",
        generation=1,
        rank=5,
        status=WorkflowRunStatus(
            phase=Phase.PAUSED, observed_generation=1, saga_id=f"default.{name}.1.1"
        ),
    )


async def project(bus: Bus, run: RunProjection) -> None:
    await bus.runs.put(run_key(run.namespace, run.name), run.model_dump_json().encode())


async def eventually(check: Callable[[], Awaitable[Any]], what: str) -> Any:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while asyncio.get_running_loop().time() < deadline:
        if found := await check():
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def object_patches(emulator: KubeEmulator, name: str) -> int:
    """PATCH requests on the WorkflowRun itself (not its status)."""
    return sum(
        1
        for served in emulator.served()
        if served.method == "PATCH" and served.path.split("?")[0].endswith(f"/{RUNS}/{name}")
    )


async def press(console: Console, name: str, operation: str) -> tuple[int, dict[str, Any]]:
    url = f"{console.url}/api/runs/default/{name}/{operation}"
    async with console.http.post(url) as response:
        return response.status, await response.json()


async def test_promote_patches_the_annotation_on_the_api_object_once_and_waits_on_the_projection(
    kube_console: Console, objects: client.CustomObjectsApi, emulator: KubeEmulator
) -> None:
    name = "kube-gate"
    await asyncio.to_thread(create_run, objects, name)
    await project(kube_console.bus, paused(name))
    pressing = asyncio.create_task(press(kube_console, name, "promote"))

    async def annotated() -> dict[str, Any] | None:
        body = await asyncio.to_thread(get_run, objects, name)
        return body if "plnt.work/promote" in (body["metadata"].get("annotations") or {}) else None

    body = await eventually(annotated, "the plnt.work/promote annotation on the API object")
    assert body["metadata"]["generation"] == 1  # metadata only: no new generation
    assert object_patches(emulator, name) == 1
    assert await ResourceStore(kube_console.bus).get("WorkflowRun", "default", name) is None
    # the saga answered: the fold leaves the projection Ready (the watcher's part)
    ready = paused(name).model_copy(
        update={
            "rank": 9,
            "status": paused(name).status.model_copy(update={"phase": Phase.READY}),
        }
    )
    await project(kube_console.bus, ready)
    status, answer = await asyncio.wait_for(pressing, timeout=WAIT_S)
    assert (status, answer["message"]) == (200, f"workflowrun/{name} promoted: phase Ready")
    assert answer["steps"][-1] == f"{name}: Ready"
    assert object_patches(emulator, name) == 1


async def test_with_the_watcher_on_the_api_a_promote_from_the_console_ends_ready(
    kube_console: Console,
    watcher: None,
    objects: client.CustomObjectsApi,
    emulator: KubeEmulator,
) -> None:
    name = "kube-saga"
    bus = kube_console.bus
    await project(bus, paused(name))
    await asyncio.to_thread(create_run, objects, name)

    async def promoter(msg: Any) -> None:
        """The promoter's answer to a promote at the gate: the run is Ready."""
        cause = Envelope.model_validate_json(msg.data)
        ready = RunReady(revision="demo-1.0.0-g1", endpoint="http://router/workflows/kube-saga")
        await bus.publish(follow_up(cause, EventType.RUN_READY, ready, source="test-promoter"))

    answering = await bus.nc.subscribe(
        event_subject(EventType.PROMOTE_REQUESTED, "default", name), cb=promoter
    )
    try:
        status, answer = await press(kube_console, name, "promote")
    finally:
        await answering.unsubscribe()
    assert (status, answer.get("message")) == (200, f"workflowrun/{name} promoted: phase Ready")

    async def written() -> dict[str, Any] | None:
        body = await asyncio.to_thread(get_run, objects, name)
        return body if (body.get("status") or {}).get("phase") == "Ready" else None

    body = await eventually(written, "phase Ready in the object's status")
    assert body["status"]["revision"] == "demo-1.0.0-g1"
    assert "plnt.work/promote" not in (body["metadata"].get("annotations") or {})


async def test_a_refused_patch_is_one_message_naming_the_verb_and_resource(
    kube_console: Console, objects: client.CustomObjectsApi, emulator: KubeEmulator
) -> None:
    name = "kube-denied"
    await asyncio.to_thread(create_run, objects, name)
    await project(kube_console.bus, paused(name))
    emulator.refuse_updates(name=name, code=403)  # as RBAC without patch would

    status, answer = await press(kube_console, name, "promote")

    assert status == 403
    assert answer["error"].startswith(f"patch workflowruns.plnt.work default/{name}: ")
    assert answer["error"].endswith(
        "(the console's service account needs patch on workflowruns.plnt.work in namespace "
        "'default')"
    )
    assert "\n" not in answer["error"] and "Traceback" not in answer["error"]
    body = await asyncio.to_thread(get_run, objects, name)
    assert not (body["metadata"].get("annotations") or {})


async def test_a_run_the_api_does_not_hold_answers_404_and_nothing_is_patched(
    kube_console: Console, emulator: KubeEmulator
) -> None:
    status, answer = await press(kube_console, "nope", "abort")
    assert (status, answer["error"]) == (
        404,
        "workflowruns 'nope' not found in namespace 'default'",
    )
    assert object_patches(emulator, "nope") == 0


async def test_the_run_page_reads_the_object_from_the_api(
    kube_console: Console, objects: client.CustomObjectsApi
) -> None:
    created = await asyncio.to_thread(create_run, objects, "kube-page")
    async with kube_console.http.get(f"{kube_console.url}/api/runs/default/kube-page") as response:
        assert response.status == 200
        body = await response.json()
    assert body["metadata"]["uid"] == created["metadata"]["uid"]
    assert body["spec"]["workflow"]["ref"] == "demo@1.0.0"
