"""Where Helm releases are: the kubernetes PlntBackends, one per cluster namespace.

A release's values (``helm_values``) record its run, so a release is found from Helm
alone; one of another namespace's run (or not plnt's) is not ours.
"""

from dataclasses import dataclass
from typing import Any, Protocol

from plnt_common.errors import BackendUnavailable, PlntError
from plnt_common.events import SpecPulled
from plnt_common.logs import get_logger
from plnt_common.releases import DesiredRelease, may_be_release_of
from plnt_common.resources import CLUSTER_DOMAIN, KubernetesTarget, PlntBackendSpec
from plnt_installer.adapters.helm_cli import HelmRelease, ReleaseMissing
from plnt_installer.adapters.helm_values import desired_from_values
from plnt_installer.adapters.kube_access import Connection
from plnt_installer.kube_ports import KubernetesTargets
from plnt_installer.ports import ReleasesUnreadable

log = get_logger(__name__)


class Connector(Protocol):
    """Credentials to clusters (``kube_access.KubeConnector``)."""

    async def connect(self, *, backend_name: str, target: KubernetesTarget) -> Connection: ...


@dataclass(frozen=True)
class Target:
    """One kubernetes PlntBackend."""

    name: str
    spec: PlntBackendSpec

    @property
    def service_domain(self) -> str:
        """The DNS suffix plnt calls this backend's runner Services under."""
        kube = self.spec.kubernetes
        return kube.service_domain if kube is not None else CLUSTER_DOMAIN

    @classmethod
    def of(cls, pulled: SpecPulled) -> "Target":
        """The PlntBackend ``pulled`` installs onto."""
        return cls(name=pulled.backend_name, spec=pulled.backend)

    @property
    def kube(self) -> KubernetesTarget:
        if self.spec.kubernetes is None:  # the model forbids it for type kubernetes
            raise BackendUnavailable(f"PlntBackend {self.name!r} has no spec.kubernetes")
        return self.spec.kubernetes

    def same_place(self) -> tuple[object, ...]:
        """Equal for PlntBackends whose releases live in the same cluster namespace."""
        ref = self.kube.kubeconfig_secret_ref
        secret = (ref.namespace, ref.name, ref.key) if ref else None
        return (self.kube.in_cluster, secret, self.kube.namespace)


@dataclass(frozen=True)
class Found:
    """A release of a run found on a target."""

    target: Target
    connection: Connection
    helm: HelmRelease
    values: dict[str, Any]
    desired: DesiredRelease


class ReleaseFinder:
    """Finds releases on one kubernetes PlntBackend or on any of them."""

    def __init__(self, *, targets: KubernetesTargets, connector: Connector) -> None:
        self._targets = targets
        self._connector = connector

    async def connect(self, target: Target) -> Connection:
        return await self._connector.connect(backend_name=target.name, target=target.kube)

    async def find(self, target: Target, *, namespace: str, release: str) -> Found | None:
        """The release on ``target`` if it is there and belongs to ``namespace``."""
        conn = await self.connect(target)
        current, values = await current_release(conn, release)
        if current is None or values is None:
            return None
        desired = desired_from_values(name=release, values=values)
        if desired is None or desired.namespace != namespace:
            return None  # a release of that name, but another namespace's run (or not plnt's)
        return Found(target=target, connection=conn, helm=current, values=values, desired=desired)

    async def locate(self, *, namespace: str, release: str) -> Found | None:
        """The release on whichever kubernetes PlntBackend holds it."""
        for target in await self._distinct_targets():
            try:
                found = await self.find(target, namespace=namespace, release=release)
            except PlntError as exc:
                _skip_or_raise(target, exc)
                continue
            if found is not None:
                return found
        return None

    async def releases(self, *, namespace: str, run_name: str) -> list[DesiredRelease]:
        """Every release of the run on every kubernetes PlntBackend, by name. Each one is
        asked, whichever is silent: ``ReleasesUnreadable`` then carries what the others
        hold, so one cluster's API being away does not hide the rest."""
        found: list[DesiredRelease] = []
        silent: list[str] = []
        for target in await self._distinct_targets():
            try:
                found.extend(await self._listed(target, namespace=namespace, run_name=run_name))
            except PlntError as exc:
                if not exc.retryable:
                    _skip_or_raise(target, exc)
                    continue
                log.warning("backend.unreadable", backend=target.name, error=str(exc))
                silent.append(target.name)
        found.sort(key=lambda r: r.release)
        if silent:
            raise ReleasesUnreadable(found=found, backends=tuple(silent))
        return found

    async def every_release(self, target: Target) -> list[DesiredRelease]:
        """Every plnt release installed onto ``target``, of any run (its cluster namespace
        may hold other PlntBackends' too: the BACKEND annotation says whose)."""
        conn = await self.connect(target)
        found: list[DesiredRelease] = []
        for name in await conn.helm.names(namespace=conn.namespace):
            try:
                values = await conn.helm.values(namespace=conn.namespace, name=name)
            except ReleaseMissing:  # uninstalled since the listing
                continue
            desired = desired_from_values(name=name, values=values)
            if desired is not None and desired.backend_name == target.name:
                found.append(desired)
        return found

    async def _listed(
        self, target: Target, *, namespace: str, run_name: str
    ) -> list[DesiredRelease]:
        conn = await self.connect(target)
        found: list[DesiredRelease] = []
        for name in await conn.helm.names(namespace=conn.namespace):
            if not may_be_release_of(name, namespace=namespace, run_name=run_name):
                continue
            try:
                values = await conn.helm.values(namespace=conn.namespace, name=name)
            except ReleaseMissing:  # uninstalled since the listing
                continue
            desired = desired_from_values(name=name, values=values)
            if desired is not None and (desired.namespace, desired.run_name) == (
                namespace,
                run_name,
            ):
                found.append(desired)
        return found

    async def _distinct_targets(self) -> list[Target]:
        """Kubernetes PlntBackends, one per cluster namespace (the first name wins)."""
        seen: set[tuple[object, ...]] = set()
        distinct: list[Target] = []
        for name, spec in sorted((await self._targets.all()).items()):
            if spec.kubernetes is None:
                continue
            target = Target(name=name, spec=spec)
            if target.same_place() not in seen:
                seen.add(target.same_place())
                distinct.append(target)
        return distinct


async def current_release(
    conn: Connection, name: str
) -> tuple[HelmRelease | None, dict[str, Any] | None]:
    """The release's latest revision and its values; (None, None) when it is not there."""
    current = await conn.helm.status(namespace=conn.namespace, name=name)
    if current is None:
        return None, None
    try:
        return current, await conn.helm.values(namespace=conn.namespace, name=name)
    except ReleaseMissing:  # removed between the two commands
        return None, None


def where(target: Target, namespace: str, name: str) -> str:
    return f"{namespace}/{name} on PlntBackend {target.name}"


def _skip_or_raise(target: Target, exc: PlntError) -> None:
    """While searching every PlntBackend: a broken one (bad credentials) must not block
    the others, so it is logged and skipped; one that may answer later is retried."""
    if exc.retryable:
        raise exc
    log.error("backend.skipped", backend=target.name, error=str(exc))
