"""Ports of the installer's Kubernetes backend, beside ``ports.ReleaseBackend``.

The Helm backend serves every ``PlntBackend`` of type kubernetes, so it needs what a
single-target backend does not: the catalog of them (to find a release again later),
the workflow spec bytes (the runner's ConfigMap), and Deployment status. Only
``typing.Protocol`` definitions live here; adapters implement them, and no method
raises an infrastructure exception.
"""

from typing import Protocol

from plnt_common.resources import PlntBackendSpec
from plnt_installer.readiness import DeploymentState


class KubernetesTargets(Protocol):
    """The PlntBackends of type kubernetes."""

    async def all(self) -> dict[str, PlntBackendSpec]:
        """Every kubernetes PlntBackend by name; unreadable ones are left out (and logged).

        Raises ``BusUnavailable`` or ``KubernetesUnavailable`` (retryable) when the store
        or the API does not answer, ``BackendUnavailable`` when the API refuses.
        """
        ...


class SpecSource(Protocol):
    """Pulled workflow specs by digest (``plnt-specs``)."""

    async def get(self, digest: str) -> bytes:
        """The spec bytes stored under ``digest``.

        Raises ``SpecNotFound`` when nothing is stored under it, ``BusUnavailable``
        (retryable) when the store does not answer.
        """
        ...


class DeploymentReadiness(Protocol):
    """Deployment status on one cluster."""

    async def get(self, *, namespace: str, name: str) -> DeploymentState | None:
        """The Deployment's status (with its pods' problems while not ready); None if absent.

        Raises ``KubernetesUnavailable`` (retryable) when the API does not answer and
        ``BackendUnavailable`` when it refuses (e.g. forbidden).
        """
        ...
