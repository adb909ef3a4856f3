"""The watcher's status writes under API trouble, against the API emulator's faults:
a refused write is retried with backoff until written, or until the run is gone; a
status left stale is repaired from the projection at the next list."""

import asyncio
import contextlib
import functools
import itertools
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from kube_support import GROUP, RUNS, VERSION, create_run, get_run, run_body
from kubernetes import client
from prometheus_client import REGISTRY

from plnt_common.bus.bus import Bus
from plnt_common.projection import TERMINAL_RANK, RunProjection
from plnt_common.resources import WorkflowRunStatus
from plnt_common.status import Phase
from plnt_testkit.kube_emulator import WORKFLOW_RUNS, KubeEmulator
from plnt_testkit.kube_emulator.server import Served
from plnt_watcher.adapters.kube_api import KubernetesRejected, connect
from plnt_watcher.adapters.kubernetes_source import KubernetesSource
from plnt_watcher.adapters.projections import ProjectionStore
from plnt_watcher.loops import ResourceLoop
from plnt_watcher.status_sync import ConvergingStatus

READY = {"phase": "Ready", "observedGeneration": 1, "sagaId": "default.a.1.1"}
STATUS = "/workflowruns/a/status"


@pytest.fixture
def source(kubeconfig: Path) -> KubernetesSource:
    api = connect(kubeconfig=str(kubeconfig), context="", user_agent="plnt-watcher/test")
    return KubernetesSource(api=api, watch_timeout_s=30, request_timeout_s=5)


async def in_thread(function: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(function, *args)


def retries() -> float:
    return REGISTRY.get_sample_value("plnt_watcher_status_retries_total") or 0.0


@pytest.mark.parametrize(
    "outage_s", [pytest.param(3.0, id="3s"), pytest.param(30.0, id="30s", marks=pytest.mark.slow)]
)
async def test_a_status_write_refused_through_an_outage_is_written_when_it_ends(
    outage_s: float,
    source: KubernetesSource,
    objects: client.CustomObjectsApi,
    emulator: KubeEmulator,
) -> None:
    await in_thread(create_run, objects, "a")
    before = retries()
    started = time.monotonic()
    emulator.refuse_status_writes(code=503, seconds=outage_s)

    assert await source.write_status(namespace="default", name="a", status=READY)

    assert time.monotonic() - started >= outage_s
    assert (await in_thread(get_run, objects, "a"))["status"] == READY
    refused = emulator.requests("PUT", STATUS) - 1
    assert refused >= 2, "the outage was not retried through"
    assert retries() - before == refused


async def test_a_write_refused_as_invalid_is_not_retried(
    source: KubernetesSource, objects: client.CustomObjectsApi, emulator: KubeEmulator
) -> None:
    await in_thread(create_run, objects, "a")
    emulator.refuse_status_writes(code=422, seconds=60)

    with pytest.raises(KubernetesRejected):
        await source.write_status(namespace="default", name="a", status=READY)

    assert emulator.requests("PUT", STATUS) == 1


async def test_a_run_deleted_during_the_outage_ends_the_retries(
    source: KubernetesSource, objects: client.CustomObjectsApi, emulator: KubeEmulator
) -> None:
    await in_thread(create_run, objects, "a")
    emulator.refuse_status_writes(code=503, seconds=60)
    writing = asyncio.create_task(source.write_status(namespace="default", name="a", status=READY))
    deadline = time.monotonic() + 5
    while emulator.requests("PUT", STATUS) == 0:
        assert time.monotonic() < deadline, "the write never reached the API"
        await asyncio.sleep(0.02)

    await in_thread(
        objects.delete_namespaced_custom_object, "plnt.work", "v1", "default", "workflowruns", "a"
    )

    assert await asyncio.wait_for(writing, timeout=15) is False


# --- repair at a relist or a start -----------------------------------------------------


def ready_projection() -> RunProjection:
    return RunProjection(
        namespace="default",
        name="a",
        saga_id="default.a.1.1",
        generation=1,
        rank=TERMINAL_RANK,
        status=WorkflowRunStatus(phase=Phase.READY, observed_generation=1, saga_id="default.a.1.1"),
    )


async def stale_run(objects: client.CustomObjectsApi, phase: str) -> None:
    """Run ``a`` with the finalizer on and a status at the current generation, ``phase``."""
    await in_thread(create_run, objects, "a")
    body = await in_thread(get_run, objects, "a")
    body["metadata"]["finalizers"] = ["plnt.work/saga"]
    body = await in_thread(
        objects.replace_namespaced_custom_object, GROUP, VERSION, "default", RUNS, "a", body
    )
    body["status"] = {"phase": phase, "observedGeneration": 1, "sagaId": "default.a.1.1"}
    await in_thread(
        objects.replace_namespaced_custom_object_status, GROUP, VERSION, "default", RUNS, "a", body
    )


async def test_a_watcher_started_after_refused_writes_repairs_the_status_at_its_start(
    nats_url: str, source: KubernetesSource, objects: client.CustomObjectsApi
) -> None:
    """The saga ended Ready while the API refused the writes: the resource still shows
    Promoting at the current observedGeneration. The watcher's first list repairs it."""
    await stale_run(objects, "Promoting")
    bus = await Bus.open(nats_url, service="test")
    await bus.runs.put("default.a", ready_projection().model_dump_json().encode())
    projections = ProjectionStore(bus.runs)
    loop = ResourceLoop(
        bus=bus,
        source=ConvergingStatus(source=source, projections=projections),
        projections=projections,
    )
    stop = asyncio.Event()
    running = asyncio.create_task(loop.run(stop))
    try:
        deadline = time.monotonic() + 10
        while (await in_thread(get_run, objects, "a"))["status"]["phase"] != "Ready":
            assert not running.done(), "the resource loop ended"
            assert time.monotonic() < deadline, "the stale Promoting was never repaired"
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        await bus.close()


# --- one failing object -----------------------------------------------------------------


def lists(emulator: KubeEmulator) -> int:
    """LIST requests of WorkflowRuns answered (watches are GETs with watch=true)."""
    return sum(
        1
        for served in emulator.served()
        if served.method == "GET"
        and served.path.split("?")[0].endswith("/workflowruns")
        and "watch=true" not in served.path.lower()
    )


@contextlib.asynccontextmanager
async def resource_loop(nats_url: str, source: KubernetesSource) -> AsyncIterator[None]:
    bus = await Bus.open(nats_url, service="test")
    projections = ProjectionStore(bus.runs)
    loop = ResourceLoop(
        bus=bus,
        source=ConvergingStatus(source=source, projections=projections),
        projections=projections,
    )
    stop = asyncio.Event()
    running = asyncio.create_task(loop.run(stop))
    try:
        yield
    finally:
        stop.set()
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        await bus.close()


async def test_an_object_whose_updates_are_refused_delays_no_other_and_relists_nothing(
    nats_url: str,
    source: KubernetesSource,
    objects: client.CustomObjectsApi,
    emulator: KubeEmulator,
) -> None:
    emulator.refuse_updates(name="a-refused", code=422)  # an admission policy says no
    names = ("a-refused", "b", "c", "d")
    for name in names:
        await in_thread(create_run, objects, name)

    async with resource_loop(nats_url, source):
        deadline = time.monotonic() + 5
        while True:
            bodies = [await in_thread(get_run, objects, name) for name in names[1:]]
            if all(body["metadata"].get("finalizers") for body in bodies):
                break
            assert time.monotonic() < deadline, "the objects after the refused one waited"
            await asyncio.sleep(0.05)
        while REGISTRY.get_sample_value("plnt_watcher_queue_depth") != 1:
            assert time.monotonic() < deadline, "the refused object is not counted as queued"
            await asyncio.sleep(0.01)
        while emulator.requests("PATCH", "/workflowruns/a-refused") < 2:
            assert time.monotonic() < deadline + 5, "the refused object was not retried"
            await asyncio.sleep(0.05)

    assert lists(emulator) == 1, "a failing object restarted the watch"
    refused = await in_thread(get_run, objects, "a-refused")
    assert not refused["metadata"].get("finalizers")


# --- lists in pages, 429 ----------------------------------------------------------------


def list_requests(emulator: KubeEmulator) -> list[Served]:
    return [
        served
        for served in emulator.served()
        if served.method == "GET"
        and served.path.split("?")[0].endswith("/workflowruns")
        and "watch=true" not in served.path.lower()
    ]


def paged_source(kubeconfig: Path, page_size: int) -> KubernetesSource:
    api = connect(kubeconfig=str(kubeconfig), context="", user_agent="plnt-watcher/test")
    return KubernetesSource(
        api=api, watch_timeout_s=30, request_timeout_s=5, list_page_size=page_size
    )


async def first_changes(source: KubernetesSource, count: int) -> list[str]:
    names: list[str] = []
    async with contextlib.aclosing(source.watch()) as changes:
        async for _, name, _ in changes:
            names.append(name)
            if len(names) == count:
                return names
    raise AssertionError(f"the watch ended after {names}")


async def test_a_list_is_read_in_pages(
    kubeconfig: Path, objects: client.CustomObjectsApi, emulator: KubeEmulator
) -> None:
    for name in ("a", "b", "c", "d", "e"):
        await in_thread(create_run, objects, name)

    names = await first_changes(paged_source(kubeconfig, 2), 5)

    assert names == ["a", "b", "c", "d", "e"]
    pages = list_requests(emulator)
    assert len(pages) == 3
    assert ["limit=2" in page.path for page in pages] == [True, True, True]
    assert ["continue=" in page.path for page in pages] == [False, True, True]


async def test_a_continue_token_expired_between_pages_lists_again_from_the_start(
    kubeconfig: Path, objects: client.CustomObjectsApi, emulator: KubeEmulator
) -> None:
    for name in ("a", "b", "c"):
        await in_thread(create_run, objects, name)

    lists_seen: list[int] = []

    def before_second_page() -> None:  # the first page's version is compacted away
        lists_seen.append(1)
        if len(lists_seen) == 2:
            emulator.store.create(WORKFLOW_RUNS, "default", run_body("d"))
            emulator.store.compact()

    emulator.before("GET", "/workflowruns", before_second_page, times=2)
    names = await first_changes(paged_source(kubeconfig, 2), 4)

    assert sorted(names) == ["a", "b", "c", "d"]
    pages = list_requests(emulator)
    assert [page.status for page in pages][:2] == [200, 410]
    assert "continue=" not in pages[2].path, "the list did not start over"


async def test_a_429_is_honoured_for_its_retry_after(
    source: KubernetesSource, objects: client.CustomObjectsApi, emulator: KubeEmulator
) -> None:
    await in_thread(create_run, objects, "a")
    before = retries()
    # more 429s than urllib3's own three Retry-After retries: the watcher's call waits too
    emulator.throttle(times=4, retry_after_s=1, path_suffix="/workflowruns/a")

    assert await source.write_status(namespace="default", name="a", status=READY)

    reads = [s for s in emulator.served() if s.method == "GET" and s.path.endswith("/a")]
    assert [s.status for s in reads] == [429, 429, 429, 429, 200]
    gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(reads)]
    assert min(gaps) >= 1.0, f"a Retry-After was not waited: {gaps}"
    assert retries() == before  # honoured by the call itself, not the status backoff


async def test_the_emulator_pages_like_an_api_server(
    objects: client.CustomObjectsApi, emulator: KubeEmulator
) -> None:
    for name in ("a", "b", "c", "d", "e"):
        await in_thread(create_run, objects, name)

    def listed(**paging: Any) -> Any:
        return objects.list_namespaced_custom_object(GROUP, VERSION, "default", RUNS, **paging)

    first = await in_thread(functools.partial(listed, limit=2))
    assert [i["metadata"]["name"] for i in first["items"]] == ["a", "b"]
    assert first["metadata"]["remainingItemCount"] == 3
    rest = await in_thread(
        functools.partial(listed, limit=10, _continue=first["metadata"]["continue"])
    )
    assert [i["metadata"]["name"] for i in rest["items"]] == ["c", "d", "e"]
    assert "continue" not in rest["metadata"]
    assert rest["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]

    await in_thread(create_run, objects, "f")
    emulator.compact()
    with pytest.raises(client.ApiException) as stale:
        await in_thread(functools.partial(listed, limit=2, _continue=first["metadata"]["continue"]))
    assert stale.value.status == 410
