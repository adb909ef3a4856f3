"""No orphans when the owner of the embedded stack (`plnt up`) dies, even by SIGKILL.

Two layers: the local-backend stops every runner and exits when its owner pid is gone,
and each runner is told the owner pid (PLNT_RUNNER_EXIT_WITH_PID) and exits by itself
when the local-backend is gone too. The second layer is shown with the stand-in runner;
the real ``plnt_runner`` must implement the same variable.
"""

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from local_backend_support import (
    SpawnBackend,
    StartBackend,
    desired_release,
    eventually,
    http_get,
    pid_files,
    process_gone,
)

from plnt_installer.adapters.local_releases import LocalReleaseBackend

NS = "default"
RELEASE = "review-responder-g1"
SAGA = "default.review-responder.1.1"


@pytest.fixture
def owner() -> Iterator[subprocess.Popen[bytes]]:
    """A process standing in for `plnt up`."""
    process = subprocess.Popen(["sleep", "300"])
    yield process
    if process.poll() is None:
        process.kill()
    process.wait()


async def _gone(pid: int) -> bool:
    return process_gone(pid)


async def test_the_local_backend_stops_its_runners_and_exits_when_its_owner_is_gone(
    start_local_backend: StartBackend,
    releases: LocalReleaseBackend,
    spec: str,
    owner: subprocess.Popen[bytes],
    data_dir: Path,
) -> None:
    backend = await start_local_backend(owner_pid=owner.pid)
    await releases.install(desired_release(digest=spec))
    observed = await releases.wait_ready(namespace=NS, release=RELEASE, saga_id=SAGA, timeout_s=20)

    owner.kill()
    owner.wait()

    assert backend.task is not None
    await asyncio.wait_for(backend.task, timeout=20)
    assert process_gone(observed.pid)
    assert not pid_files(data_dir)


async def test_runners_exit_by_themselves_when_the_owner_dies_after_the_local_backend(
    spawn_local_backend: SpawnBackend,
    releases: LocalReleaseBackend,
    spec: str,
    owner: subprocess.Popen[bytes],
) -> None:
    service = spawn_local_backend(PLNT_LOCAL_BACKEND_OWNER_PID=str(owner.pid))
    await releases.install(desired_release(digest=spec))
    observed = await releases.wait_ready(namespace=NS, release=RELEASE, saga_id=SAGA, timeout_s=20)
    _, info = await http_get(f"{observed.url}/info")
    assert info["exit_with_pid"] == str(owner.pid)

    service.kill()  # the local-backend cannot clean up any more
    assert not process_gone(observed.pid)
    owner.kill()
    owner.wait()

    await eventually(lambda: _gone(observed.pid), what="the runner to exit on its own")
