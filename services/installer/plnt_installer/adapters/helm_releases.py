"""``ReleaseBackend`` on Kubernetes: one Helm release of ``charts/plnt-runner`` per revision.

A release is named ``<run>-g<generation>`` and lives in the PlntBackend's
``kubernetes.namespace``; canary and stable are separate releases, so the stable one keeps
serving while a canary exists. Its values (``helm_values``) record the run, revision,
saga and role, so releases are listed and rebuilt from Helm alone; the runner's
workflow.yaml goes in as a value, read from ``plnt-specs`` by digest.

Before ``helm upgrade --install`` the backend remedies a release left mid-operation or
failed, as Flux helm-controller does (the decision is ``remediation.remediate``).
Readiness comes from the Deployment in the Kubernetes API, polled without blocking the
loop and bounded by the caller's timeout, never from ``helm --wait``.

One backend object serves every kubernetes PlntBackend: an install passes its spec.pulled
(``pulled``), naming the PlntBackend and the run's placement; without it the backend finds
existing releases by asking each PlntBackend's cluster (compensation, promotion and
removal know only the run).

It does what it is told; whether to install, promote or remove is the handlers' call.
"""

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from plnt_common.errors import (
    BackendUnavailable,
    InstallFailed,
    PlntError,
    SpecInvalid,
    SpecNotFound,
)
from plnt_common.events import SpecPulled
from plnt_common.logs import get_logger
from plnt_common.releases import DesiredRelease, ObservedRelease, ReleasePhase
from plnt_common.resources import KubernetesTarget, PlntBackendSpec
from plnt_installer.adapters.helm_cli import HelmRelease, ReleaseMissing
from plnt_installer.adapters.helm_values import (
    Placement,
    chart_values,
    desired_from_values,
    gpu_class_of,
    placement_of,
    service_url,
    with_role,
)
from plnt_installer.adapters.kube_access import Connection
from plnt_installer.adapters.kube_errors import ReleaseBusy
from plnt_installer.kube_ports import KubernetesTargets, SpecSource
from plnt_installer.readiness import judge
from plnt_installer.remediation import (
    HelmStatus,
    Remedy,
    Revision,
    needs_history,
    remediate,
)

log = get_logger(__name__)

POLL_S = 2.0
"""Between two reads of a Deployment while waiting for it."""
PENDING_GRACE_S = 60.0
"""A pending Helm operation younger than this may be another replica's, live: wait."""
HELM_TIMEOUT_S = 120.0
"""``--timeout`` of install, upgrade, rollback and remediation commands."""


class Connector(Protocol):
    """Credentials to clusters (``kube_access.KubeConnector``)."""

    async def connect(self, *, backend_name: str, target: KubernetesTarget) -> Connection: ...


@dataclass(frozen=True)
class _Target:
    """One kubernetes PlntBackend."""

    name: str
    spec: PlntBackendSpec

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
class _Found:
    """A release of a run found on a target."""

    target: _Target
    connection: Connection
    helm: HelmRelease
    values: dict[str, Any]
    desired: DesiredRelease


class HelmReleaseBackend:
    """Helm releases on every kubernetes PlntBackend; see the module and ``ReleaseBackend``."""

    def __init__(
        self,
        *,
        targets: KubernetesTargets,
        specs: SpecSource,
        connector: Connector,
        chart: Path,
        helm_timeout_s: float = HELM_TIMEOUT_S,
        poll_s: float = POLL_S,
        pending_grace_s: float = PENDING_GRACE_S,
    ) -> None:
        self._targets = targets
        self._specs = specs
        self._connector = connector
        self._chart = chart
        self._helm_timeout_s = helm_timeout_s
        self._poll_s = poll_s
        self._pending_grace_s = pending_grace_s

    # --- ReleaseBackend: on the PlntBackend ``pulled`` names, else wherever it is ------

    async def install(self, release: DesiredRelease, *, pulled: SpecPulled | None = None) -> None:
        """Remedy, then ``helm upgrade --install``; no waiting.

        With ``pulled``, onto its PlntBackend with its run's placement; without, an
        existing release is upgraded (e.g. its role) wherever it is, and
        ``BackendUnavailable`` is raised when no kubernetes PlntBackend holds it.
        """
        if pulled is not None:
            await self._apply(_target_of(pulled), release, placement=placement_of(pulled.run))
            return
        found = await self._locate(namespace=release.namespace, release=release.release)
        if found is None:
            raise BackendUnavailable(
                f"release {release.namespace}/{release.release} is on no kubernetes "
                "PlntBackend; a first install must pass its spec.pulled"
            )
        await self._apply(found.target, release, placement=None)

    async def wait_ready(
        self,
        *,
        namespace: str,
        release: str,
        saga_id: str,
        timeout_s: float,
        pulled: SpecPulled | None = None,
    ) -> ObservedRelease:
        """Poll the Deployment until ready; ``InstallFailed`` naming what was observed."""
        if pulled is not None:
            target = _target_of(pulled)
        else:
            found = await self._locate(namespace=namespace, release=release)
            if found is None:
                raise InstallFailed(f"release {release} of namespace {namespace} is not installed")
            target = found.target
        return await self._wait(
            target, namespace=namespace, release=release, saga_id=saga_id, timeout_s=timeout_s
        )

    async def uninstall(
        self, *, namespace: str, release: str, timeout_s: float, pulled: SpecPulled | None = None
    ) -> bool:
        if pulled is not None:
            found = await self._find(_target_of(pulled), namespace=namespace, release=release)
        else:
            found = await self._locate(namespace=namespace, release=release)
        if found is None:
            return False
        await self._remove(found, timeout_s=timeout_s)
        return True

    async def releases(self, *, namespace: str, run_name: str) -> list[DesiredRelease]:
        found: list[DesiredRelease] = []
        for target in await self._distinct_targets():
            try:
                found.extend(await self._list(target, namespace=namespace, run_name=run_name))
            except PlntError as exc:
                _skip_or_raise(target, exc)
        return sorted(found, key=lambda r: r.release)

    async def status(self, *, namespace: str, release: str) -> ObservedRelease | None:
        found = await self._locate(namespace=namespace, release=release)
        return None if found is None else await self._observe(found)

    # --- on one target ----------------------------------------------------------------

    async def _apply(
        self, target: _Target, release: DesiredRelease, *, placement: Placement | None
    ) -> None:
        """Remedy the release's state, then ``helm upgrade --install`` it (if it changes)."""
        gpu_class_of(release, backend_name=target.name, backend=target.spec)  # before any I/O
        conn = await self._connect(target)
        name, namespace = release.release, conn.namespace
        where = _where(target, namespace, name)
        current, current_values = await self._current(conn, name)
        remedy = Remedy.NONE
        if current is not None:
            owner = desired_from_values(name=name, values=current_values or {})
            if owner is None or (owner.namespace, owner.run_name) != (
                release.namespace,
                release.run_name,
            ):
                held_by = f"{owner.namespace}/{owner.run_name}" if owner else "not plnt"
                raise InstallFailed(f"release {where} already exists and belongs to {held_by}")
            remedy, current_values = await self._remedy(conn, current, current_values, where=where)

        if (
            placement is None
            and current_values is not None
            and _same_rollout(desired_from_values(name=name, values=current_values), release)
        ):
            # Promotion: the recorded values with the new role, so the pods stay as they are.
            values = with_role(current_values, release.role)
        else:
            values = await self._render(target, release, placement)
        if remedy is Remedy.NONE and current is not None and values == current_values:
            log.info("helm.unchanged", release=name, helm_namespace=namespace)
            return
        done = await conn.helm.upgrade(
            namespace=namespace,
            name=name,
            chart=self._chart,
            values=values,
            description=f"plnt {release.saga_id}: {release.revision} as {release.role.value}",
            timeout_s=self._helm_timeout_s,
        )
        log.info(
            "helm.upgraded",
            release=name,
            helm_namespace=namespace,
            backend=target.name,
            helm_revision=done.revision,
            role=release.role.value,
        )

    async def _current(
        self, conn: Connection, name: str
    ) -> tuple[HelmRelease | None, dict[str, Any] | None]:
        current = await conn.helm.status(namespace=conn.namespace, name=name)
        if current is None:
            return None, None
        try:
            return current, await conn.helm.values(namespace=conn.namespace, name=name)
        except ReleaseMissing:  # removed between the two commands
            return None, None

    async def _remedy(
        self,
        conn: Connection,
        current: HelmRelease,
        values: dict[str, Any] | None,
        *,
        where: str,
    ) -> tuple[Remedy, dict[str, Any] | None]:
        """Apply the remediation ``current`` calls for; returns it and the values left
        in place (None once uninstalled)."""
        name, namespace = current.name, conn.namespace
        history: list[Revision] = []
        if needs_history(current.status):
            history = await conn.helm.history(namespace=namespace, name=name)
        plan = remediate(
            current=Revision(number=current.revision, status=current.status),
            history=history,
            age_s=current.age_s(),
            pending_grace_s=self._pending_grace_s,
        )
        if plan.remedy is not Remedy.NONE:
            log.warning(
                "helm.remediate",
                release=name,
                helm_namespace=namespace,
                helm_status=current.status.value,
                remedy=plan.remedy.value,
                reason=plan.reason,
            )
        match plan.remedy:
            case Remedy.WAIT:
                raise ReleaseBusy(f"release {where} is {plan.reason}")
            case Remedy.UNINSTALL:
                await conn.helm.uninstall(
                    namespace=namespace, name=name, timeout_s=self._helm_timeout_s
                )
                return plan.remedy, None
            case Remedy.ROLLBACK:
                assert plan.rollback_to is not None
                await conn.helm.rollback(
                    namespace=namespace,
                    name=name,
                    revision=plan.rollback_to,
                    timeout_s=self._helm_timeout_s,
                )
                return plan.remedy, await conn.helm.values(namespace=namespace, name=name)
        return plan.remedy, values

    async def _render(
        self, target: _Target, release: DesiredRelease, placement: Placement | None
    ) -> dict[str, Any]:
        try:
            workflow = await self._specs.get(release.spec_digest)
            return chart_values(
                release=release,
                workflow=workflow,
                backend_name=target.name,
                backend=target.spec,
                placement=placement,
            )
        except (SpecNotFound, SpecInvalid) as exc:  # pulled and validated before: no retry helps
            raise InstallFailed(f"release {release.release}: {exc}") from None

    async def _wait(
        self, target: _Target, *, namespace: str, release: str, saga_id: str, timeout_s: float
    ) -> ObservedRelease:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        found = await self._find(target, namespace=namespace, release=release)
        if found is None:
            raise InstallFailed(
                f"release {release} of namespace {namespace} is not installed on "
                f"PlntBackend {target.name}"
            )
        where = _where(target, found.connection.namespace, release)
        if found.desired.saga_id != saga_id:
            raise InstallFailed(
                f"release {where} is desired by saga {found.desired.saga_id}, not {saga_id}"
            )
        if found.helm.status is HelmStatus.FAILED:
            raise InstallFailed(f"release {where} failed in Helm: {found.helm.description}")
        deployments = found.connection.deployments
        observed = "nothing observed"
        while True:
            try:
                state = await deployments.get(namespace=found.connection.namespace, name=release)
            except PlntError as exc:
                if not exc.retryable:  # e.g. forbidden: waiting longer cannot tell
                    raise InstallFailed(f"release {where}: {exc}") from None
                observed = f"API unavailable: {exc}"  # keep polling until the deadline
            else:
                verdict = judge(state)
                observed = verdict.message
                if verdict.ready:
                    return self._observed(found, ReleasePhase.READY, message=observed)
                if verdict.failed:
                    raise InstallFailed(f"release {where} failed: {observed}")
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise InstallFailed(
                    f"release {where} was not ready after {timeout_s:g}s ({observed})"
                )
            await asyncio.sleep(min(self._poll_s, remaining))

    async def _remove(self, found: _Found, *, timeout_s: float) -> None:
        await found.connection.helm.uninstall(
            namespace=found.connection.namespace, name=found.helm.name, timeout_s=timeout_s
        )
        log.info(
            "helm.uninstalled",
            release=found.helm.name,
            helm_namespace=found.connection.namespace,
            backend=found.target.name,
        )

    async def _list(
        self, target: _Target, *, namespace: str, run_name: str
    ) -> list[DesiredRelease]:
        conn = await self._connect(target)
        ours = re.compile(rf"^{re.escape(run_name)}-g[0-9]+$")
        found: list[DesiredRelease] = []
        for name in await conn.helm.names(namespace=conn.namespace):
            if not ours.match(name):
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

    async def _observe(self, found: _Found) -> ObservedRelease:
        status = found.helm.status
        if status is HelmStatus.FAILED:
            return self._observed(found, ReleasePhase.FAILED, message=found.helm.description)
        if status is not HelmStatus.DEPLOYED:
            return self._observed(found, ReleasePhase.STARTING, message=f"helm: {status.value}")
        state = await found.connection.deployments.get(
            namespace=found.connection.namespace, name=found.helm.name
        )
        verdict = judge(state)
        if verdict.ready:
            phase = ReleasePhase.READY
        else:
            phase = ReleasePhase.FAILED if verdict.failed else ReleasePhase.STARTING
        return self._observed(found, phase, message=verdict.message)

    @staticmethod
    def _observed(found: _Found, phase: ReleasePhase, *, message: str) -> ObservedRelease:
        return ObservedRelease(
            namespace=found.desired.namespace,
            release=found.desired.release,
            revision=found.desired.revision,
            saga_id=found.desired.saga_id,
            phase=phase,
            url=service_url(
                name=found.helm.name, namespace=found.connection.namespace, values=found.values
            ),
            message=message,
        )

    # --- finding ---------------------------------------------------------------------

    async def _find(self, target: _Target, *, namespace: str, release: str) -> _Found | None:
        """The release on ``target`` if it is there and belongs to ``namespace``."""
        conn = await self._connect(target)
        current, values = await self._current(conn, release)
        if current is None or values is None:
            return None
        desired = desired_from_values(name=release, values=values)
        if desired is None or desired.namespace != namespace:
            return None  # a release of that name, but another namespace's run (or not plnt's)
        return _Found(target=target, connection=conn, helm=current, values=values, desired=desired)

    async def _locate(self, *, namespace: str, release: str) -> _Found | None:
        for target in await self._distinct_targets():
            try:
                found = await self._find(target, namespace=namespace, release=release)
            except PlntError as exc:
                _skip_or_raise(target, exc)
                continue
            if found is not None:
                return found
        return None

    async def _distinct_targets(self) -> list[_Target]:
        """Kubernetes PlntBackends, one per cluster namespace (the first name wins)."""
        seen: set[tuple[object, ...]] = set()
        distinct: list[_Target] = []
        for name, spec in sorted((await self._targets.all()).items()):
            if spec.kubernetes is None:
                continue
            target = _Target(name=name, spec=spec)
            if target.same_place() not in seen:
                seen.add(target.same_place())
                distinct.append(target)
        return distinct

    async def _connect(self, target: _Target) -> Connection:
        return await self._connector.connect(backend_name=target.name, target=target.kube)


def _same_rollout(recorded: DesiredRelease | None, wanted: DesiredRelease) -> bool:
    """Whether the recorded values install what ``wanted`` does, role aside."""
    if recorded is None:
        return False
    return (recorded.saga_id, recorded.revision, recorded.spec_digest) == (
        wanted.saga_id,
        wanted.revision,
        wanted.spec_digest,
    )


def _skip_or_raise(target: _Target, exc: PlntError) -> None:
    """While searching every PlntBackend: a broken one (bad credentials) must not block
    the others, so it is logged and skipped; one that may answer later is retried."""
    if exc.retryable:
        raise exc
    log.error("backend.skipped", backend=target.name, error=str(exc))


def _target_of(pulled: SpecPulled) -> _Target:
    return _Target(name=pulled.backend_name, spec=pulled.backend)


def _where(target: _Target, namespace: str, name: str) -> str:
    return f"{namespace}/{name} on PlntBackend {target.name}"
