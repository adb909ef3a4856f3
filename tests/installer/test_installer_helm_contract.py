"""One contract for the ``ReleaseBackend`` port, run against both adapters.

- local: ``LocalReleaseBackend`` on a real nats-server, with the real local-backend
  service running in the test's loop and starting (fake) runner processes;
- helm: ``HelmReleaseBackend`` installing onto an in-cluster PlntBackend, driving the recording
  fake ``helm``, with readiness read from the Kubernetes API emulator where the test
  plays the Deployment controller.

The port promises the same to the handlers whichever backend serves a run.
"""

import asyncio
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from installer_helm_support import FakeCluster, desired, spec_pulled

from plnt_common.bus.bus import Bus
from plnt_common.events import SpecPulled
from plnt_common.releases import DesiredRelease, ReleasePhase
from plnt_common.workflow import spec_digest
from plnt_installer.adapters.helm.backend import HelmReleaseBackend
from plnt_installer.adapters.local_releases import LocalReleaseBackend
from plnt_installer.ports import ReleaseBackend

# The local-backend's test helpers (settings with short intervals, the fake runner, process
# cleanup); appended, not prepended, so nothing here is shadowed.
LOCAL_BACKEND_TESTS = Path(__file__).resolve().parents[1] / "local_backend"
if str(LOCAL_BACKEND_TESTS) not in sys.path:
    sys.path.append(str(LOCAL_BACKEND_TESTS))

from local_backend_support import (  # noqa: E402
    SPEC,
    InProcessBackend,
    desired_release,
    fast_settings,
    kill_leftovers,
)

from plnt_local_backend.app import run as run_local_backend  # noqa: E402


@dataclass
class Harness:
    backend: ReleaseBackend
    release: DesiredRelease
    pulled: SpecPulled | None
    """The install's context (the Helm backend's PlntBackend); the local one needs none."""
    settle: Callable[[DesiredRelease], Awaitable[None]]
    """What the platform does after an install (the local-backend: on its own)."""


async def _nothing(_: DesiredRelease) -> None:
    return None


@pytest.fixture
async def local_harness(nats_url: str, tmp_path: Path) -> AsyncIterator[Harness]:
    bus = await Bus.open(nats_url, service="test")
    digest = spec_digest(SPEC)
    await bus.specs.put(digest, SPEC)
    settings = fast_settings(nats_url=nats_url, data_dir=tmp_path / "local-backend")
    service = InProcessBackend(settings=settings)
    service.task = asyncio.create_task(run_local_backend(settings, service.stop_event))
    try:
        yield Harness(
            backend=LocalReleaseBackend(bus, resync_s=0.2),
            release=desired_release(digest=digest),
            pulled=None,
            settle=_nothing,
        )
    finally:
        await service.stop()
        kill_leftovers(settings.data_dir)
        await bus.close()


@pytest.fixture
def helm_harness(helm_backend: HelmReleaseBackend, cluster: FakeCluster) -> Harness:
    pulled = spec_pulled()

    async def deployment_becomes_ready(release: DesiredRelease) -> None:
        await asyncio.to_thread(cluster.deployment, release.release, replicas=1, ready=1)

    return Harness(
        backend=helm_backend,
        release=desired(pulled),
        pulled=pulled,
        settle=deployment_becomes_ready,
    )


@pytest.fixture(params=["local", "helm"])
def harness(request: pytest.FixtureRequest) -> Harness:
    found: Harness = request.getfixturevalue(f"{request.param}_harness")
    return found


class TestReleaseBackendContract:
    async def test_an_installed_release_becomes_ready_and_is_listed_with_its_status(
        self, harness: Harness
    ) -> None:
        release, backend = harness.release, harness.backend

        await backend.install(release, pulled=harness.pulled)
        await harness.settle(release)
        observed = await backend.wait_ready(
            pulled=harness.pulled,
            namespace=release.namespace,
            release=release.release,
            saga_id=release.saga_id,
            timeout_s=20,
        )

        assert (observed.phase, observed.saga_id, observed.revision) == (
            ReleasePhase.READY,
            release.saga_id,
            release.revision,
        )
        assert observed.url.startswith("http://")
        listed = await backend.releases(namespace=release.namespace, run_name=release.run_name)
        assert listed == [release]
        status = await backend.status(namespace=release.namespace, release=release.release)
        assert status is not None
        assert (status.phase, status.saga_id, status.url) == (
            ReleasePhase.READY,
            release.saga_id,
            observed.url,
        )

    async def test_uninstall_removes_the_release_from_listing_and_status(
        self, harness: Harness
    ) -> None:
        release, backend = harness.release, harness.backend
        await backend.install(release, pulled=harness.pulled)
        await harness.settle(release)
        await backend.wait_ready(
            pulled=harness.pulled,
            namespace=release.namespace,
            release=release.release,
            saga_id=release.saga_id,
            timeout_s=20,
        )

        removed = await backend.uninstall(
            pulled=harness.pulled,
            namespace=release.namespace,
            release=release.release,
            timeout_s=20,
        )

        assert removed is True
        assert await backend.releases(namespace=release.namespace, run_name=release.run_name) == []
        assert await backend.status(namespace=release.namespace, release=release.release) is None

    async def test_uninstall_of_a_missing_release_returns_false(self, harness: Harness) -> None:
        release = harness.release

        removed = await harness.backend.uninstall(
            pulled=harness.pulled, namespace=release.namespace, release=release.release, timeout_s=5
        )

        assert removed is False

    async def test_every_release_lists_the_releases_of_every_run(self, harness: Harness) -> None:
        pulled = harness.pulled or spec_pulled()  # the local backend installs without one
        backend = harness.backend
        release = harness.release.model_copy(update={"backend_name": pulled.backend_name})
        await backend.install(release, pulled=harness.pulled)

        listed = await backend.every_release(pulled=pulled)

        assert [(r.namespace, r.release, r.gpu_count) for r in listed] == [
            (release.namespace, release.release, release.gpu_count)
        ]

    async def test_releases_of_other_runs_and_namespaces_are_not_listed(
        self, harness: Harness
    ) -> None:
        release, backend = harness.release, harness.backend
        await backend.install(release, pulled=harness.pulled)

        assert await backend.releases(namespace=release.namespace, run_name="other-run") == []
        assert await backend.releases(namespace="team-b", run_name=release.run_name) == []
        assert [
            r.release
            for r in await backend.releases(namespace=release.namespace, run_name=release.run_name)
        ] == [release.release]
