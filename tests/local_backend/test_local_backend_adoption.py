"""A restarted local-backend adopts live runners, replaces dead ones and stops strays.

The local-backend runs as its own process here (``python -m plnt_local_backend``) so it
can be stopped the way `plnt up` or an operator stops it: SIGTERM, or SIGKILL.
"""

import os
import signal
from pathlib import Path

import pytest
from local_backend_support import (
    SpawnBackend,
    StartBackend,
    desired_release,
    eventually,
    pid_files,
    process_gone,
    runner_starts,
)

from plnt_common.bus.bus import Bus
from plnt_common.errors import InstallFailed
from plnt_common.releases import ObservedRelease, ReleasePhase, desired_key
from plnt_common.workflow import spec_digest
from plnt_installer.adapters.local_releases import LocalReleaseBackend
from plnt_local_backend.adapters.processes import stop_all_runners

NS = "default"
RELEASE = "review-responder-g1"
SAGA_1 = "default.review-responder.1.1"
SAGA_2 = "default.review-responder.1.2"


async def _ready(releases: LocalReleaseBackend, saga_id: str = SAGA_1) -> ObservedRelease:
    return await releases.wait_ready(namespace=NS, release=RELEASE, saga_id=saga_id, timeout_s=20)


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
async def test_a_restarted_local_backend_adopts_the_live_runner_instead_of_starting_another(
    how: str,
    spawn_local_backend: SpawnBackend,
    releases: LocalReleaseBackend,
    spec: str,
    data_dir: Path,
) -> None:
    first = spawn_local_backend()
    record = desired_release(digest=spec, saga_id=SAGA_1)
    await releases.install(record)
    before = await _ready(releases)

    code = first.terminate() if how == "sigterm" else first.kill()
    assert code == (0 if how == "sigterm" else -signal.SIGKILL), first.log()
    assert not process_gone(before.pid), "stopping the local-backend must not stop runners"

    spawn_local_backend()
    # A new saga for the same launch is no reason to restart; seeing it observed proves the
    # new local-backend has taken the release over.
    await releases.install(record.model_copy(update={"saga_id": SAGA_2}))
    after = await _ready(releases, saga_id=SAGA_2)

    assert after.pid == before.pid
    assert after.url == before.url
    assert after.restarts == 0
    assert runner_starts(data_dir, RELEASE) == [before.pid]


async def test_an_in_process_restart_adopts_the_runner_and_still_supervises_it(
    start_local_backend: StartBackend,
    releases: LocalReleaseBackend,
    spec: str,
    data_dir: Path,
) -> None:
    first = await start_local_backend()
    record = desired_release(digest=spec, saga_id=SAGA_1)
    await releases.install(record)
    before = await _ready(releases)
    await first.stop()
    assert not process_gone(before.pid)

    await start_local_backend()
    await releases.install(record.model_copy(update={"saga_id": SAGA_2}))
    adopted = await _ready(releases, saga_id=SAGA_2)
    assert adopted.pid == before.pid

    # The adopted runner is supervised like one started here: killed, it is restarted.
    os.kill(before.pid, signal.SIGKILL)

    async def restarted() -> ObservedRelease | None:
        now = await releases.status(namespace=NS, release=RELEASE)
        ok = now and now.phase is ReleasePhase.READY and now.pid != before.pid
        return now if ok else None

    replacement = await eventually(restarted, what="the adopted runner to be restarted")
    assert replacement.restarts == 1
    assert runner_starts(data_dir, RELEASE) == [before.pid, replacement.pid]


async def test_a_runner_that_died_while_the_local_backend_was_down_is_started_again(
    spawn_local_backend: SpawnBackend,
    releases: LocalReleaseBackend,
    spec: str,
    data_dir: Path,
) -> None:
    first = spawn_local_backend()
    record = desired_release(digest=spec, saga_id=SAGA_1)
    await releases.install(record)
    before = await _ready(releases)
    first.terminate()
    os.killpg(before.pid, signal.SIGKILL)
    await eventually(lambda: _async(process_gone(before.pid)), what="the runner to die")

    spawn_local_backend()

    async def replaced() -> ObservedRelease | None:
        now = await releases.status(namespace=NS, release=RELEASE)
        ok = now and now.phase is ReleasePhase.READY and now.pid != before.pid
        return now if ok else None

    after = await eventually(replaced, what="a new runner")
    assert runner_starts(data_dir, RELEASE) == [before.pid, after.pid]


async def test_a_runner_whose_release_was_deleted_while_the_local_backend_was_down_is_stopped(
    spawn_local_backend: SpawnBackend,
    releases: LocalReleaseBackend,
    bus: Bus,
    spec: str,
    data_dir: Path,
) -> None:
    first = spawn_local_backend()
    await releases.install(desired_release(digest=spec))
    before = await _ready(releases)
    first.terminate()
    await bus.releases.delete(desired_key(NS, RELEASE))

    spawn_local_backend()

    await eventually(lambda: _async(process_gone(before.pid)), what="the stray runner to stop")

    async def observed_gone() -> bool:
        return await releases.status(namespace=NS, release=RELEASE) is None

    await eventually(observed_gone, what="the observed record to go")
    await eventually(
        lambda: _async(not (data_dir / "releases" / NS / RELEASE).exists()),
        what="the release directory to go",
    )


async def test_stop_all_runners_stops_every_runner_left_after_the_local_backend_exited(
    start_local_backend: StartBackend,
    releases: LocalReleaseBackend,
    spec: str,
    data_dir: Path,
) -> None:
    backend = await start_local_backend()
    records = [
        desired_release(digest=spec, release=f"review-responder-g{n}", saga_id=f"s.{n}")
        for n in (1, 2)
    ]
    pids = []
    for record in records:
        await releases.install(record)
    for record in records:
        ready = await releases.wait_ready(
            namespace=NS, release=record.release, saga_id=record.saga_id, timeout_s=20
        )
        pids.append(ready.pid)
    await backend.stop()

    stopped = stop_all_runners(data_dir, grace_s=5)

    assert stopped == sorted(pids)
    assert all(process_gone(pid) for pid in pids)
    assert not pid_files(data_dir)
    assert stop_all_runners(data_dir) == []


async def _async(value: bool) -> bool:
    return value


async def test_a_failed_release_stays_failed_across_a_restart_of_the_local_backend(
    start_local_backend: StartBackend,
    releases: LocalReleaseBackend,
    bus: Bus,
    spec: str,
    data_dir: Path,
) -> None:
    first = await start_local_backend()
    missing = b"kind: Workflow # stored too late\n"
    broken = desired_release(digest=spec_digest(missing))
    await releases.install(broken)
    with pytest.raises(InstallFailed, match="is not in the object store"):
        await _ready(releases)
    await first.stop()
    await bus.specs.put(broken.spec_digest, missing)  # a retry would now find it

    await start_local_backend()
    # Another release going Ready shows the new local-backend has reconciled everything.
    sync = desired_release(digest=spec, release="sync-g1", run_name="sync", saga_id="sync.1")
    await releases.install(sync)
    await releases.wait_ready(namespace=NS, release="sync-g1", saga_id="sync.1", timeout_s=20)

    observed = await releases.status(namespace=NS, release=RELEASE)
    assert observed is not None
    assert observed.phase is ReleasePhase.FAILED
    assert runner_starts(data_dir, RELEASE) == []
