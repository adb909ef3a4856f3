"""``ReleaseBackend`` on Kubernetes: one Helm release of ``charts/plnt-runner`` per revision.

A release is named ``<run>-g<generation>`` and lives in the PlntBackend's
``kubernetes.namespace``; canary and stable are separate releases, so the stable one keeps
serving while a canary exists. Its values (``helm_values``) record the run, revision,
saga and role, so releases are listed and rebuilt from Helm alone.

One backend object serves every kubernetes PlntBackend: an install passes its spec.pulled
(``pulled``), naming the PlntBackend and the run's placement; without it the backend finds
existing releases by asking each PlntBackend's cluster (compensation, promotion and
removal know only the run). Each action is its own module; this class only composes them.
It does what it is told; whether to install, promote or remove is the handlers' call.
"""

from pathlib import Path

from plnt_common.errors import BackendUnavailable, InstallFailed
from plnt_common.events import SpecPulled
from plnt_common.releases import DesiredRelease, ObservedRelease
from plnt_installer.adapters.helm import install, ready, uninstall
from plnt_installer.adapters.helm.finding import Connector, ReleaseFinder, Target
from plnt_installer.adapters.helm_values import placement_of
from plnt_installer.kube_ports import KubernetesTargets, SpecSource

POLL_S = 2.0
"""Between two reads of a Deployment while waiting for it."""
PENDING_GRACE_S = 60.0
"""A pending Helm operation younger than this may be another replica's, live: wait."""
HELM_TIMEOUT_S = 120.0
"""``--timeout`` of install, upgrade, rollback and remediation commands."""


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
        self._finder = ReleaseFinder(targets=targets, connector=connector)
        self._specs = specs
        self._options = install.InstallOptions(
            chart=chart, helm_timeout_s=helm_timeout_s, pending_grace_s=pending_grace_s
        )
        self._poll_s = poll_s

    async def install(self, release: DesiredRelease, *, pulled: SpecPulled | None = None) -> None:
        """Remedy, then ``helm upgrade --install``; no waiting.

        With ``pulled``, onto its PlntBackend with its run's placement; without, an
        existing release is upgraded (e.g. its role) wherever it is, and
        ``BackendUnavailable`` is raised when no kubernetes PlntBackend holds it.
        """
        if pulled is not None:
            target, placement = Target.of(pulled), placement_of(pulled.run)
        else:
            found = await self._finder.locate(namespace=release.namespace, release=release.release)
            if found is None:
                raise BackendUnavailable(
                    f"release {release.namespace}/{release.release} is on no kubernetes "
                    "PlntBackend; a first install must pass its spec.pulled"
                )
            target, placement = found.target, None
        await install.install(
            self._finder, self._specs, self._options, target, release, placement=placement
        )

    async def wait_ready(
        self,
        *,
        namespace: str,
        release: str,
        saga_id: str,
        timeout_s: float,
        pulled: SpecPulled | None = None,
    ) -> ObservedRelease:
        if pulled is not None:
            target = Target.of(pulled)
        else:
            found = await self._finder.locate(namespace=namespace, release=release)
            if found is None:
                raise InstallFailed(f"release {release} of namespace {namespace} is not installed")
            target = found.target
        return await ready.wait_ready(
            self._finder,
            target,
            namespace=namespace,
            release=release,
            saga_id=saga_id,
            timeout_s=timeout_s,
            poll_s=self._poll_s,
        )

    async def uninstall(
        self, *, namespace: str, release: str, timeout_s: float, pulled: SpecPulled | None = None
    ) -> bool:
        if pulled is not None:
            found = await self._finder.find(Target.of(pulled), namespace=namespace, release=release)
        else:
            found = await self._finder.locate(namespace=namespace, release=release)
        if found is None:
            return False
        await uninstall.remove(found, timeout_s=timeout_s)
        return True

    async def releases(self, *, namespace: str, run_name: str) -> list[DesiredRelease]:
        return await self._finder.releases(namespace=namespace, run_name=run_name)

    async def every_release(self, *, pulled: SpecPulled) -> list[DesiredRelease]:
        return await self._finder.every_release(Target.of(pulled))

    async def still_removing(self, *, namespace: str, run_name: str) -> list[str]:
        # helm deletes a release's record after its objects: one being removed is still
        # in ``releases``
        return []

    async def status(self, *, namespace: str, release: str) -> ObservedRelease | None:
        found = await self._finder.locate(namespace=namespace, release=release)
        return None if found is None else await ready.observe(found)
