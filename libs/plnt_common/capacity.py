"""GPU capacity per PlntBackend and GPU class: the one view every service and the CLI read.

What is counted (DESIGN section 13):

- ``kubernetes``: per node matching the class's ``nodeSelector``, the node's
  ``status.allocatable`` of the class's ``resourceName`` minus what the node's
  non-terminated pods request of it. ``free`` is the sum over nodes and
  ``largestFreeOnOneNode`` the largest single node's, so fragmentation shows (two nodes
  with one free GPU each hold no 2-GPU pod).
- ``local``: the class's declared ``capacity`` minus the GPUs plnt's own releases on that
  backend hold (``gpuCount`` x replicas); there is one "node".

The installer observes and writes one ``BackendCapacity`` per PlntBackend to the
``plnt-capacity`` bucket (key: the backend's name). Placements that were decided but
whose runner is not counted yet are ``Reservation`` records under
``reservations.<backend>``, written with compare-and-set so two installers never book
the same GPUs. Pure models and arithmetic: no I/O here.
"""

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from plnt_common.resources import GpuClass

TERMINATED_POD_PHASES = frozenset({"Succeeded", "Failed"})
"""Pods in these phases hold no resources: the scheduler no longer counts them."""
LOCAL_NODE = "local"
"""The one node of a ``local`` backend."""
RESERVATIONS_PREFIX = "reservations"
RESERVATION_GRACE_S = 60.0


def reservations_key(backend: str) -> str:
    return f"{RESERVATIONS_PREFIX}.{backend}"


class ClassCapacity(BaseModel):
    """One GPU class of one backend at ``observedAt``."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    gpu_class: str = Field(alias="gpuClass", examples=["a100"])
    resource_name: str = Field(default="", alias="resourceName", examples=["nvidia.com/gpu"])
    free: int = Field(ge=0, description="Free GPUs of the class over every node.")
    largest_free_on_one_node: int = Field(
        alias="largestFreeOnOneNode", ge=0, description="The most any single node has free."
    )
    observed_at: datetime = Field(alias="observedAt")
    nodes: dict[str, int] = Field(
        default_factory=dict,
        description="Free GPUs per node (the bus view only: placements book a node).",
    )

    def status(self) -> dict[str, Any]:
        """The PlntBackend ``status.capacity[]`` entry (``resources.GpuClassCapacity``)."""
        return self.model_dump(by_alias=True, mode="json", exclude={"nodes", "resource_name"})


class BackendCapacity(BaseModel):
    """Every GPU class of one PlntBackend, as one observation."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    backend: str
    type: str = ""
    observed_at: datetime = Field(alias="observedAt")
    classes: tuple[ClassCapacity, ...] = ()

    def of(self, gpu_class: str) -> ClassCapacity | None:
        return next((c for c in self.classes if c.gpu_class == gpu_class), None)


class Reservation(BaseModel):
    """GPUs a placement booked on a node until its runner is counted by an observation."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    release: str
    """``<namespace>/<release>``: one reservation per release, so a redelivery reuses it."""
    gpu_class: str = Field(alias="gpuClass")
    node: str
    gpus: int = Field(ge=0)
    reserved_at: datetime = Field(alias="reservedAt")
    """A placement whose runner never came up (its saga ended some other way) stops
    counting after its backend's readyTimeout (``RESERVATION_GRACE_S`` more)."""
    up_at: datetime | None = Field(default=None, alias="upAt")
    """When the runner came up: from the first observation after it the pod counts and the
    reservation no longer does."""


class Reservations(BaseModel):
    model_config = ConfigDict(frozen=True)

    items: tuple[Reservation, ...] = ()


def node_free(
    *,
    gpu_class: GpuClass,
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
) -> dict[str, int]:
    """Free GPUs of ``gpu_class`` per node: allocatable minus non-terminated pods' requests.

    Nodes are Kubernetes Node bodies, pods Pod bodies (as the API lists them); a node
    outside the class's ``nodeSelector`` or without the resource is left out, an
    unschedulable (cordoned) node counts 0.
    """
    resource = gpu_class.resource_name
    free: dict[str, int] = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        labels = meta.get("labels") or {}
        if any(labels.get(k) != v for k, v in gpu_class.node_selector.items()):
            continue
        allocatable = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
        if allocatable is None:
            continue
        cordoned = bool((node.get("spec") or {}).get("unschedulable"))
        free[meta.get("name", "")] = 0 if cordoned else quantity(allocatable)
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName") or ""
        if node_name not in free:
            continue
        if (pod.get("status") or {}).get("phase") in TERMINATED_POD_PHASES:
            continue
        free[node_name] -= pod_request(pod, resource)
    return {name: max(0, value) for name, value in free.items()}


def pod_request(pod: Mapping[str, Any], resource: str) -> int:
    """What the scheduler counts: the sum of the containers' requests, or the largest init
    container's when that is more (init containers run one at a time, before them)."""
    spec = pod.get("spec") or {}

    def requested(container: Mapping[str, Any]) -> int:
        resources = container.get("resources") or {}
        # extended resources (GPUs) are requested through limits alone just as well
        value = (resources.get("requests") or {}).get(resource)
        if value is None:
            value = (resources.get("limits") or {}).get(resource)
        return 0 if value is None else quantity(value)

    main = sum(requested(c) for c in spec.get("containers") or [])
    init = max((requested(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def quantity(value: Any) -> int:
    """A whole-number Kubernetes quantity (GPUs are counted in units); junk counts 0."""
    try:
        return int(str(value))
    except ValueError:
        return 0


def class_capacity(
    *, name: str, gpu_class: GpuClass, nodes: Mapping[str, int], now: datetime
) -> ClassCapacity:
    """The sum and the largest single node: never an average, which would hide that no
    node holds a multi-GPU pod."""
    return ClassCapacity(
        gpu_class=name,
        resource_name=gpu_class.resource_name,
        free=sum(nodes.values()),
        largest_free_on_one_node=max(nodes.values(), default=0),
        observed_at=now,
        nodes=dict(nodes),
    )


def local_nodes(*, gpu_class: GpuClass, held: int) -> dict[str, int]:
    """A ``local`` backend's one node: the declared capacity minus plnt's releases."""
    return {LOCAL_NODE: max(0, gpu_class.capacity - held)}


def age_s(capacity: BackendCapacity, now: datetime) -> float:
    return max(0.0, (now - capacity.observed_at).total_seconds())
