"""Where free GPUs per node come from, by PlntBackend type.

``kubernetes``: the target cluster's nodes and pods (``KubeCapacityReader``) through the
connection the Helm backend uses. ``local``: the declared ``capacity`` minus plnt's own
desired releases on that backend in ``plnt-releases`` (what the local-backend runs).
"""

from typing import Protocol

import nats.errors
from nats.aio.client import Client
from pydantic import ValidationError

from plnt_common import subjects
from plnt_common.bus.kv_snapshot import kv_snapshot
from plnt_common.capacity import local_nodes, node_free
from plnt_common.errors import BackendUnavailable, BusUnavailable
from plnt_common.releases import DESIRED_PREFIX, DesiredRelease
from plnt_common.resources import KubernetesTarget, PlntBackendSpec
from plnt_installer.adapters.kube_capacity import KubeCapacityReader

NodesByClass = dict[str, dict[str, int]]
"""GPU class -> node -> free GPUs."""
_TRANSIENT = (nats.errors.Error, TimeoutError, OSError)


class ApiConnection(Protocol):
    @property
    def api(self) -> object: ...


class Connector(Protocol):
    async def connect(self, *, backend_name: str, target: KubernetesTarget) -> ApiConnection: ...


class KubeCapacitySource:
    def __init__(self, *, connector: Connector) -> None:
        self._connector = connector

    async def free_nodes(self, *, name: str, spec: PlntBackendSpec) -> NodesByClass:
        """Raises ``BackendUnavailable`` or ``KubernetesUnavailable`` when unreadable."""
        assert spec.kubernetes is not None  # a kubernetes PlntBackendSpec always has it
        conn = await self._connector.connect(backend_name=name, target=spec.kubernetes)
        if conn.api is None:
            raise BackendUnavailable(f"PlntBackend {name!r}: no API client to list nodes with")
        nodes, pods = await KubeCapacityReader(api=conn.api).nodes_and_pods()  # type: ignore[arg-type]
        return {
            class_name: node_free(gpu_class=gpu_class, nodes=nodes, pods=pods)
            for class_name, gpu_class in spec.gpu_classes.items()
        }


class LocalCapacitySource:
    def __init__(self, *, nc: Client) -> None:
        self._nc = nc

    async def free_nodes(self, *, name: str, spec: PlntBackendSpec) -> NodesByClass:
        """Only classes with a declared ``capacity``: the others are not counted.
        Raises ``BusUnavailable`` when the bucket does not answer."""
        try:
            stored = await kv_snapshot(self._nc, subjects.RELEASES_BUCKET, f"{DESIRED_PREFIX}.>")
        except _TRANSIENT as exc:
            raise BusUnavailable(f"listing releases: {exc!r}") from None
        held: dict[str, int] = {}
        for _, value in stored.values():
            try:
                release = DesiredRelease.model_validate_json(value)
            except ValidationError:
                continue  # the installer's own listing logs it
            if release.backend_name == name and release.gpu_class:
                held[release.gpu_class] = held.get(release.gpu_class, 0) + (
                    release.gpu_count * release.replicas
                )
        return {
            class_name: local_nodes(gpu_class=gpu_class, held=held.get(class_name, 0))
            for class_name, gpu_class in spec.gpu_classes.items()
            if gpu_class.capacity > 0
        }
