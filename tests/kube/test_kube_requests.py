"""Operator requests on the Kubernetes path: `kubectl annotate` on a WorkflowRun in the API
emulator, the watcher's resource loop on a real nats-server turning it into the request
event and removing the annotation; a refusal recorded as a Kubernetes Event."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from kube_support import GROUP, RUNS, VERSION, create_run, get_run
from kubernetes import client

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.history import read_events
from plnt_common.events import Envelope, EventType
from plnt_common.projection import RunProjection, run_key
from plnt_common.resources import WorkflowRunStatus
from plnt_common.status import Phase
from plnt_testkit.kube_emulator import EVENTS, KubeEmulator
from plnt_watcher.adapters.kube_api import connect
from plnt_watcher.adapters.kube_events import EventRecorder
from plnt_watcher.adapters.kubernetes_source import KubernetesSource
from plnt_watcher.adapters.projections import ProjectionStore
from plnt_watcher.loops import ResourceLoop

MERGE = "application/merge-patch+json"
STOP_WITHIN_S = 15.0


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    opened = await Bus.open(nats_url, service="test")
    yield opened
    await opened.close()


@pytest.fixture
async def watching(bus: Bus, kubeconfig: Path) -> AsyncIterator[None]:
    """The watcher's resource loop on the emulator, as the Lease holder runs it."""
    api = connect(kubeconfig=str(kubeconfig), context="", user_agent="plnt-watcher/test")
    recorder = EventRecorder(api=api, instance="test", request_timeout_s=5)
    source = KubernetesSource(api=api, watch_timeout_s=30, request_timeout_s=5, recorder=recorder)
    loop = ResourceLoop(bus=bus, source=source, projections=ProjectionStore(bus.runs))
    stop = asyncio.Event()
    task = asyncio.create_task(loop.run(stop))
    yield
    stop.set()
    task.cancel()
    # bounded: a loop that ignored its cancellation would hang the whole suite (seen once
    # with every core busy); it fails this test instead, saying so
    done, _ = await asyncio.wait({task}, timeout=STOP_WITHIN_S)
    api.close()
    if not done:
        pytest.fail(f"the watcher's resource loop did not stop within {STOP_WITHIN_S:g}s")
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def projected(bus: Bus, name: str, phase: Phase) -> None:
    """The run's projection as the watcher's fold would have left it in ``phase``."""
    projection = RunProjection(
        namespace="default",
        name=name,
        saga_id=f"default.{name}.1.1",
        generation=1,
        rank=5,
        status=WorkflowRunStatus(phase=phase, observed_generation=1),
    )
    await bus.runs.put(run_key("default", name), projection.model_dump_json().encode())


async def annotate(objects: client.CustomObjectsApi, name: str, key: str, value: str) -> None:
    """What `kubectl annotate workflowrun NAME KEY=VALUE` sends."""
    patch = {"metadata": {"annotations": {key: value}}}
    await asyncio.to_thread(
        objects.patch_namespaced_custom_object,
        GROUP,
        VERSION,
        "default",
        RUNS,
        name,
        patch,
        _content_type=MERGE,
    )


async def eventually(check: Callable[[], Any], what: str, timeout_s: float = 10.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def requests_of(bus: Bus, name: str) -> list[Envelope]:
    found = []
    async for stored in read_events(bus.nc, filter_subject=subjects.run_filter("default", name)):
        if stored.event is not None and stored.event.event_type.value.endswith(".requested"):
            found.append(stored.event)
    return [e for e in found if e.event_type is not EventType.RUN_REQUESTED]


async def annotations_gone(objects: client.CustomObjectsApi, name: str) -> dict[str, Any] | None:
    body: dict[str, Any] = await asyncio.to_thread(get_run, objects, name)
    return None if (body["metadata"].get("annotations") or {}) else body


@pytest.mark.usefixtures("watching")
async def test_kubectl_annotate_promote_publishes_the_request_and_the_annotation_goes(
    bus: Bus, objects: client.CustomObjectsApi
) -> None:
    await projected(bus, "kube-gate", Phase.PAUSED)
    await asyncio.to_thread(create_run, objects, "kube-gate")
    await annotate(objects, "kube-gate", "plnt.work/promote", "2026-12-01T12:00:00Z")
    published = await eventually(lambda: requests_of(bus, "kube-gate"), "promote.requested")
    assert [(e.event_type, e.sagaid, e.data["by"]) for e in published] == [
        (
            EventType.PROMOTE_REQUESTED,
            "default.kube-gate.1.1",
            "plnt.work/promote=2026-12-01T12:00:00Z",
        )
    ]
    body = await eventually(lambda: annotations_gone(objects, "kube-gate"), "the annotation")
    assert body["metadata"]["generation"] == 1


@pytest.mark.usefixtures("watching")
async def test_a_refused_annotation_is_removed_and_recorded_as_a_warning_event(
    bus: Bus, objects: client.CustomObjectsApi, emulator: KubeEmulator
) -> None:
    await projected(bus, "kube-ready", Phase.READY)
    await asyncio.to_thread(create_run, objects, "kube-ready")
    await annotate(objects, "kube-ready", "plnt.work/abort", "now")
    await eventually(lambda: annotations_gone(objects, "kube-ready"), "the annotation")

    async def refused() -> list[dict[str, Any]]:
        return [
            e
            for e in emulator.objects(EVENTS, "default")
            if e["involvedObject"]["name"] == "kube-ready" and e["reason"] == "RequestRefused"
        ]

    recorded = await eventually(refused, "the refusal Event")
    assert recorded[0]["type"] == "Warning"
    assert recorded[0]["message"] == (
        "plnt.work/abort=now: workflowrun/kube-ready has nothing to abort: phase Ready"
    )
    assert await requests_of(bus, "kube-ready") == []
