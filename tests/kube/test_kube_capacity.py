"""GPU capacity of a kubernetes PlntBackend from the API emulator's nodes and pods.

The capacity source lists nodes and non-terminated pods (paginated, with the API's
``status.phase`` field selector) and counts free GPUs per node; a placement books a node
with room for the whole runner pod, so GPUs scattered over nodes do not add up.
"""

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.releases import DesiredRelease
from plnt_common.resources import KubernetesTarget, PlntBackend, PlntBackendSpec
from plnt_installer.adapters.backend_status import KubeBackendStatus
from plnt_installer.adapters.capacity_sources import KubeCapacitySource
from plnt_installer.adapters.capacity_store import CapacityStore
from plnt_installer.adapters.kube_capacity import KubeCapacityReader
from plnt_installer.capacity import Refusal
from plnt_installer.placement import CapacityObserver, Placements
from plnt_testkit.kube_emulator import DEFAULT_TYPES, NODES, PODS, KubeEmulator

GPU = "nvidia.com/gpu"
BACKEND = "gpu-east"
SPEC = PlntBackendSpec.model_validate(
    {
        "type": "kubernetes",
        "kubernetes": {"inCluster": True, "namespace": "plnt-runners"},
        "gpuClasses": {"a100": {"resourceName": GPU, "nodeSelector": {"gpu": "a100"}}},
    }
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[client.ApiClient]:
    with KubeEmulator(types=(*DEFAULT_TYPES, NODES, PODS)) as emulator:
        kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig")
        api = config.new_client_from_config(config_file=str(kubeconfig))
        api.emulator = emulator  # type: ignore[attr-defined]
        yield api
        api.close()


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    opened = await Bus.open(nats_url, service="test")
    yield opened
    await opened.close()


@dataclass
class Connected:
    api: client.ApiClient


class OneCluster:
    """The Helm backend's connector, narrowed to the API client the source asks for."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    async def connect(self, *, backend_name: str, target: KubernetesTarget) -> Connected:
        return Connected(self.api)


def add_node(api: client.ApiClient, name: str, gpus: int, *, gpu: str = "a100") -> None:
    body: dict[str, Any] = {
        "metadata": {"name": name, "labels": {"gpu": gpu}},
        "status": {"allocatable": {GPU: str(gpus), "cpu": "16"}},
    }
    client.CoreV1Api(api).create_node(body)


def add_pod(api: client.ApiClient, name: str, node: str, gpus: int, *, phase: str) -> None:
    core = client.CoreV1Api(api)
    body = {
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "main", "image": "runner", "resources": {"requests": {GPU: str(gpus)}}}
            ],
        },
    }
    core.create_namespaced_pod("default", body)
    core.patch_namespaced_pod_status(name, "default", {"status": {"phase": phase}})


def fragmented(api: client.ApiClient) -> None:
    """Two a100 nodes with one GPU free each, a node of another class, finished pods."""
    add_node(api, "node-a", 2)
    add_node(api, "node-b", 2)
    add_node(api, "node-h100", 8, gpu="h100")
    add_pod(api, "busy-a", "node-a", 1, phase="Running")
    add_pod(api, "busy-b", "node-b", 1, phase="Pending")
    add_pod(api, "done-a", "node-a", 1, phase="Succeeded")
    add_pod(api, "crashed-b", "node-b", 1, phase="Failed")


def canary(gpus: int) -> DesiredRelease:
    return DesiredRelease(
        namespace="default",
        run_name="agent",
        release="default-agent-g1",
        revision="1.0.0-g1",
        saga_id="default.agent.1.1",
        spec_digest="sha256:" + "0" * 64,
        workflow_name="agent",
        gpu_class="a100",
        gpu_count=gpus,
    )


async def placements_on(api: client.ApiClient, bus: Bus) -> Placements:
    kv = await bus.js.key_value(subjects.CAPACITY_BUCKET)
    source = KubeCapacitySource(connector=OneCluster(api))
    return Placements(sources={"kubernetes": source}, book=CapacityStore(kv))


async def test_free_is_counted_per_node_from_allocatable_and_live_pods(
    cluster: client.ApiClient, bus: Bus
) -> None:
    fragmented(cluster)
    placements = await placements_on(cluster, bus)

    seen = await placements.observe(BACKEND, SPEC)

    assert seen is not None
    a100 = seen.of("a100")
    assert a100 is not None
    assert (a100.free, a100.largest_free_on_one_node) == (2, 1)
    assert a100.nodes == {"node-a": 1, "node-b": 1}
    assert a100.status() == {
        "gpuClass": "a100",
        "free": 2,
        "largestFreeOnOneNode": 1,
        "observedAt": a100.status()["observedAt"],
    }


async def test_a_two_gpu_runner_fits_no_node_with_one_free_each_and_says_largest_one(
    cluster: client.ApiClient, bus: Bus
) -> None:
    fragmented(cluster)
    placements = await placements_on(cluster, bus)

    refused = await placements.reserve(backend_name=BACKEND, spec=SPEC, canary=canary(2))

    assert refused == Refusal(
        needed=2, largest_free=1, message="no node has 2 free nvidia.com/gpu (largest 1)"
    )
    assert await placements.reserve(backend_name=BACKEND, spec=SPEC, canary=canary(1)) is None


async def test_an_uneven_cluster_reports_its_largest_node_not_an_average(
    cluster: client.ApiClient, bus: Bus
) -> None:
    add_node(cluster, "node-a", 4)
    add_node(cluster, "node-b", 4)
    add_pod(cluster, "busy-a", "node-a", 1, phase="Running")
    add_pod(cluster, "busy-b", "node-b", 3, phase="Running")
    placements = await placements_on(cluster, bus)

    seen = await placements.observe(BACKEND, SPEC)

    assert seen is not None and seen.of("a100") is not None
    a100 = seen.of("a100")
    assert a100 is not None
    assert (a100.free, a100.largest_free_on_one_node) == (4, 3)
    assert await placements.reserve(backend_name=BACKEND, spec=SPEC, canary=canary(3)) is None


async def test_nodes_and_pods_are_listed_page_by_page(cluster: client.ApiClient) -> None:
    fragmented(cluster)
    emulator: KubeEmulator = cluster.emulator  # type: ignore[attr-defined]
    before = emulator.requests("GET", "/api/v1/pods")

    nodes, pods = await KubeCapacityReader(api=cluster, page_size=1).nodes_and_pods()

    assert sorted(n["metadata"]["name"] for n in nodes) == ["node-a", "node-b", "node-h100"]
    assert sorted(p["metadata"]["name"] for p in pods) == ["busy-a", "busy-b"]
    assert emulator.requests("GET", "/api/v1/pods") - before == 2  # a page per live pod


def test_the_emulator_starts_a_pod_pending_and_keeps_a_node_s_status_as_created(
    cluster: client.ApiClient,
) -> None:
    core = client.CoreV1Api(cluster)
    add_node(cluster, "node-a", 2)
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"},
        },
    )
    assert core.read_node("node-a").status.allocatable == {GPU: "2", "cpu": "16"}
    assert core.read_namespaced_pod("p", "default").status.phase == "Pending"
    on_node = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=node-a")
    assert on_node.items == []


async def test_the_observer_writes_the_plntbackend_s_status_capacity_through_the_subresource(
    cluster: client.ApiClient, bus: Bus
) -> None:
    fragmented(cluster)
    objects = client.CustomObjectsApi(cluster)
    objects.create_cluster_custom_object(
        "plnt.work",
        "v1",
        "plntbackends",
        {
            "apiVersion": "plnt.work/v1",
            "kind": "PlntBackend",
            "metadata": {"name": BACKEND},
            "spec": SPEC.model_dump(by_alias=True, exclude_defaults=True),
        },
    )

    class Catalog:
        async def all(self) -> dict[str, PlntBackendSpec]:
            return {BACKEND: SPEC}

    observer = CapacityObserver(
        catalog=Catalog(),
        placements=await placements_on(cluster, bus),
        status=KubeBackendStatus(api=cluster),
    )
    await observer.observe_once()

    stored = objects.get_cluster_custom_object("plnt.work", "v1", "plntbackends", BACKEND)
    [entry] = stored["status"]["capacity"]
    assert {k: v for k, v in entry.items() if k != "observedAt"} == {
        "gpuClass": "a100",
        "free": 2,
        "largestFreeOnOneNode": 1,
    }
    assert PlntBackend.model_validate(stored).status is not None


async def test_a_cluster_whose_nodes_cannot_be_listed_installs_unbooked(
    tmp_path: Path, bus: Bus
) -> None:
    with KubeEmulator() as emulator:  # serves no nodes: the list is refused
        api = config.new_client_from_config(
            config_file=str(emulator.write_kubeconfig(tmp_path / "kubeconfig"))
        )
        placements = await placements_on(api, bus)
        assert await placements.reserve(backend_name=BACKEND, spec=SPEC, canary=canary(1)) is None
        api.close()
