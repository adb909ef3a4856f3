"""Placement over two emulated Kubernetes clusters, each its own API emulator and
kubeconfig, with GPU nodes and pods as fixtures: the backends are tried in order, GPUs
scattered over nodes do not add up, fifty runs placed at once overcommit no node, and a
cluster whose API stops answering is passed over until it returns.

The installer's handlers decide the placement with the real capacity source (nodes and
pods listed from each emulator) and the real bookings in ``plnt-capacity``."""

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from kubernetes import client, config
from test_kube_capacity import GPU, Connected, add_node, add_pod, bus

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.events import (
    BackendChoice,
    Envelope,
    EventType,
    RunSnapshot,
    SpecPulled,
    new_event,
)
from plnt_common.resources import KubernetesTarget, PlacementEntry, PlntBackendSpec, WorkflowRunSpec
from plnt_installer.adapters.capacity_sources import KubeCapacitySource
from plnt_installer.adapters.capacity_store import CapacityStore
from plnt_installer.handlers import InstallerHandlers
from plnt_installer.placement import Placements
from plnt_installer.ports import ReleaseBackend
from plnt_testkit.kube_emulator import DEFAULT_TYPES, NODES, PODS, KubeEmulator

__all__ = ["bus"]  # the fixture shared with the one-cluster tests

CLUSTERS = ("gpu-east", "gpu-west")


def backend_spec(name: str) -> PlntBackendSpec:
    return PlntBackendSpec.model_validate(
        {
            "type": "kubernetes",
            "kubernetes": {
                "kubeconfigSecretRef": {"name": f"{name}-kubeconfig", "key": "config"},
                "namespace": "plnt-runners",
            },
            "gpuClasses": {"a100": {"resourceName": GPU, "nodeSelector": {"gpu": "a100"}}},
        }
    )


class Clusters:
    """Each PlntBackend's own API client: what the Helm backend's connector hands out."""

    def __init__(self) -> None:
        self.apis: dict[str, client.ApiClient] = {}
        self.emulators: dict[str, KubeEmulator] = {}

    async def connect(self, *, backend_name: str, target: KubernetesTarget) -> Connected:
        return Connected(self.apis[backend_name])


@pytest.fixture
def clusters(tmp_path: Path) -> Iterator[Clusters]:
    found = Clusters()
    emulators = [KubeEmulator(types=(*DEFAULT_TYPES, NODES, PODS)) for _ in CLUSTERS]
    try:
        for name, emulator in zip(CLUSTERS, emulators, strict=True):
            emulator.start()
            kubeconfig = emulator.write_kubeconfig(tmp_path / f"{name}.kubeconfig")
            found.apis[name] = config.new_client_from_config(config_file=str(kubeconfig))
            found.emulators[name] = emulator
        yield found
    finally:
        for api in found.apis.values():
            api.close()
        for emulator in emulators:
            emulator.stop()


@pytest.fixture
async def handlers(bus: Bus, clusters: Clusters) -> InstallerHandlers:
    kv = await bus.js.key_value(subjects.CAPACITY_BUCKET)
    placements = Placements(
        sources={"kubernetes": KubeCapacitySource(connector=clusters)},
        book=CapacityStore(kv),
        max_age_s=0,  # every decision observes the clusters again: a lost API shows at once
    )
    # placement never calls the release backend: only its type is looked up
    return InstallerHandlers(
        bus=bus,
        backends={"kubernetes": cast(ReleaseBackend, object())},
        ready_timeout_s=10,
        uninstall_timeout_s=10,
        placements=placements,
    )


class Handed:
    deferred_s: float | None = None

    def defer(self, seconds: float) -> None:
        self.deferred_s = seconds


def pulled(name: str, gpus: int) -> Envelope:
    spec = WorkflowRunSpec.model_validate(
        {
            "workflow": {"ref": "ticket-triage@1.1.0", "registry": "file:///registry"},
            "backend": {"gpuClass": "a100", "gpuCount": gpus},
            "placement": {"backends": list(CLUSTERS)},
        }
    )
    data = SpecPulled(
        run=RunSnapshot(namespace="default", name=name, generation=1, spec=spec),
        spec_digest="sha256:" + "0" * 64,
        workflow_name="ticket-triage",
        workflow_version="1.1.0",
        revision="1.1.0-g1",
        backend_name=CLUSTERS[0],
        backend=backend_spec(CLUSTERS[0]),
        fallbacks=(BackendChoice(backend_name=CLUSTERS[1], backend=backend_spec(CLUSTERS[1])),),
    )
    return new_event(
        EventType.SPEC_PULLED,
        data,
        namespace="default",
        name=name,
        sagaid=f"default.{name}.1.1",
        generation=1,
        source="test",
    )


async def place(handlers: InstallerHandlers, name: str, gpus: int) -> tuple[PlacementEntry, ...]:
    """The placement decided for the run ("" backend when Pending)."""
    event = pulled(name, gpus)
    placed = await handlers.place(event, event.payload(), cast(Delivery, Handed()))
    return () if placed is None else placed[1]


def states(placement: tuple[PlacementEntry, ...]) -> list[tuple[str, str, str]]:
    return [(e.backend, e.state, e.reason) for e in placement]


async def test_a_two_gpu_runner_passes_over_a_fragmented_first_cluster(
    clusters: Clusters, handlers: InstallerHandlers
) -> None:
    east, west = clusters.apis["gpu-east"], clusters.apis["gpu-west"]
    add_node(east, "east-a", 2)  # two free on east, but one per node
    add_node(east, "east-b", 2)
    add_pod(east, "busy-a", "east-a", 1, phase="Running")
    add_pod(east, "busy-b", "east-b", 1, phase="Running")
    add_node(west, "west-a", 2)

    placement = await place(handlers, "triage", gpus=2)
    one_each = await place(handlers, "small", gpus=1)

    assert states(placement) == [
        ("gpu-west", "Installing", ""),
        ("gpu-east", "Skipped", "NoCapacity: no node has 2 free nvidia.com/gpu (largest 1)"),
    ]
    assert states(one_each) == [("gpu-east", "Installing", "")]


async def test_fifty_runs_placed_at_once_overcommit_no_node_of_either_cluster(
    bus: Bus, clusters: Clusters, handlers: InstallerHandlers
) -> None:
    allocatable = {"gpu-east": {"east-a": 4, "east-b": 4, "east-c": 4}, "gpu-west": {"west-a": 8}}
    for cluster, nodes in allocatable.items():
        for node, gpus in nodes.items():
            add_node(clusters.apis[cluster], node, gpus)
    add_pod(clusters.apis["gpu-west"], "other-team", "west-a", 3, phase="Running")

    placements = await asyncio.gather(*(place(handlers, f"run-{i:02d}", 1) for i in range(50)))

    placed = Counter(p[0].backend for p in placements if p and p[0].state == "Installing")
    assert placed == Counter({"gpu-east": 12, "gpu-west": 5})
    kv = await bus.js.key_value(subjects.CAPACITY_BUCKET)
    book = CapacityStore(kv)
    for cluster, nodes in allocatable.items():
        held, _ = await book.reservations(cluster)
        per_node = Counter[str]()
        for reservation in held:
            per_node[reservation.node] += reservation.gpus
        free = {**nodes, "west-a": 5} if cluster == "gpu-west" else nodes
        assert all(per_node[node] <= free[node] for node in per_node), (cluster, per_node)


async def test_a_cluster_whose_api_stops_answering_is_passed_over_until_it_returns(
    clusters: Clusters, handlers: InstallerHandlers
) -> None:
    add_node(clusters.apis["gpu-east"], "east-a", 8)
    add_node(clusters.apis["gpu-west"], "west-a", 8)
    assert states(await place(handlers, "before", 1))[0][:2] == ("gpu-east", "Installing")

    clusters.emulators["gpu-east"].stop_listening()
    during = states(await place(handlers, "during", 1))
    clusters.emulators["gpu-east"].listen_again()
    after = states(await place(handlers, "after", 1))

    assert during[0] == ("gpu-west", "Installing", "")
    assert during[1][:2] == ("gpu-east", "Skipped")
    assert during[1][2].startswith("BackendUnavailable: its API did not answer"), during
    assert after[0][:2] == ("gpu-east", "Installing")


async def test_with_every_cluster_unanswering_the_first_is_tried_and_its_install_reports_it(
    clusters: Clusters, handlers: InstallerHandlers
) -> None:
    for emulator in clusters.emulators.values():
        emulator.stop_listening()

    placement = states(await place(handlers, "nowhere", 1))

    assert placement[0] == ("gpu-east", "Installing", "")
    assert placement[1][:2] == ("gpu-west", "Skipped")
