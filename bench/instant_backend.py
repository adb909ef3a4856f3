"""BENCHMARK FIXTURE: a release backend that installs instantly, for measuring the saga alone.

``python -m bench.instant_backend`` runs the real installer service with this backend in
place of the local one: releases live in memory and are "ready" at once, served by one
shared instant runner (``bench.instant_runner``). Never used outside ``bench/``.
"""

import os

from plnt_common.bus.bus import Bus
from plnt_common.events import SpecPulled
from plnt_common.releases import DesiredRelease, ObservedRelease, ReleasePhase
from plnt_common.runtime import run_service
from plnt_installer.app import run
from plnt_installer.handlers import SERVICE
from plnt_installer.ports import ReleaseBackend
from plnt_installer.settings import InstallerSettings


class InstantReleaseBackend:
    """Every release is ready the moment it is desired; nothing runs per release."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._releases: dict[tuple[str, str], DesiredRelease] = {}

    async def install(self, release: DesiredRelease, *, pulled: SpecPulled | None = None) -> None:
        self._releases[(release.namespace, release.release)] = release

    async def wait_ready(
        self,
        *,
        namespace: str,
        release: str,
        saga_id: str,
        timeout_s: float,
        pulled: SpecPulled | None = None,
    ) -> ObservedRelease:
        desired = self._releases[(namespace, release)]
        return ObservedRelease(
            namespace=namespace,
            release=release,
            revision=desired.revision,
            saga_id=saga_id,
            phase=ReleasePhase.READY,
            # one path per revision: the shared runner echoes it, as the runner contract asks
            url=f"{self._url}/revisions/{desired.revision}",
        )

    async def uninstall(
        self, *, namespace: str, release: str, timeout_s: float, pulled: SpecPulled | None = None
    ) -> bool:
        return self._releases.pop((namespace, release), None) is not None

    async def releases(self, *, namespace: str, run_name: str) -> list[DesiredRelease]:
        return [
            r for (ns, _), r in self._releases.items() if ns == namespace and r.run_name == run_name
        ]

    async def status(self, *, namespace: str, release: str) -> ObservedRelease | None:
        desired = self._releases.get((namespace, release))
        if desired is None:
            return None
        return await self.wait_ready(
            namespace=namespace, release=release, saga_id=desired.saga_id, timeout_s=0
        )


def main() -> None:
    settings = InstallerSettings()
    url = os.environ["PLNT_BENCH_INSTANT_RUNNER_URL"]

    def instant(bus: Bus, settings: InstallerSettings) -> dict[str, ReleaseBackend]:
        return {"local": InstantReleaseBackend(url)}

    run_service(SERVICE, settings, lambda stop: run(settings, stop, backends_factory=instant))


if __name__ == "__main__":
    main()
