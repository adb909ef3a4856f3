"""The port the installer drives a backend through; adapters implement it."""

from typing import Protocol

from plnt_common.errors import KubernetesUnavailable
from plnt_common.events import SpecPulled
from plnt_common.releases import DesiredRelease, ObservedRelease


class ReleasesUnreadable(KubernetesUnavailable):
    """``releases`` heard from some PlntBackends only: ``found`` is what the others hold,
    ``backends`` names those whose API did not answer (what they hold is unknown)."""

    def __init__(self, *, found: list[DesiredRelease], backends: tuple[str, ...]) -> None:
        names = ", ".join(repr(name) for name in backends)
        super().__init__(
            f"the API of PlntBackend {names} did not answer: the run's releases there are unknown"
        )
        self.found = found
        self.backends = backends


class ReleaseBackend(Protocol):
    """Runs releases of WorkflowRuns somewhere (local processes, Helm on Kubernetes).

    Adapters do what they are told; whether to act is decided in ``logic``. ``pulled``
    is the install's context, the spec.pulled it serves (its PlntBackend, the run's
    placement): a backend serving several PlntBackends acts on that one, and without it
    finds the release wherever it is. A single-target backend ignores it.
    """

    async def install(self, release: DesiredRelease, *, pulled: SpecPulled | None = None) -> None:
        """Record ``release`` as desired (create or update); returns without waiting."""

    async def wait_ready(
        self,
        *,
        namespace: str,
        release: str,
        saga_id: str,
        timeout_s: float,
        pulled: SpecPulled | None = None,
    ) -> ObservedRelease:
        """Wait until the release serves; raises ``InstallFailed`` on failure or timeout."""

    async def uninstall(
        self, *, namespace: str, release: str, timeout_s: float, pulled: SpecPulled | None = None
    ) -> bool:
        """Remove the release and wait until it is gone; False when it was not there."""

    async def releases(self, *, namespace: str, run_name: str) -> list[DesiredRelease]:
        """Every release of one run, canary and stable. ``ReleasesUnreadable`` when some
        PlntBackend could not be asked (it carries what the others hold)."""

    async def every_release(self, *, pulled: SpecPulled) -> list[DesiredRelease]:
        """Every plnt release, of any run, where ``pulled``'s PlntBackend installs
        (what ``capacity`` counts the GPUs of)."""

    async def still_removing(self, *, namespace: str, run_name: str) -> list[str]:
        """Releases of one run no longer in ``releases`` whose removal the backend has not
        confirmed yet (an ``uninstall`` that timed out): uninstall them again to wait."""

    async def status(self, *, namespace: str, release: str) -> ObservedRelease | None:
        """What the backend reports for ``release``; None when it reports nothing."""
