"""Several local-backends on one bus and one data dir, one per `local` PlntBackend.

Each runs only the releases installed onto its backend, keeps them under
``<data_dir>/<backend>/``, and its start-up cleanup touches only its own releases; without
a backend one process runs them all, as before.
"""

from pathlib import Path

import pytest
from local_backend_support import StartBackend, desired_release, eventually, runner_starts
from pydantic import ValidationError

from plnt_common.bus.bus import Bus
from plnt_common.releases import DesiredRelease, ObservedRelease, desired_key, observed_key
from plnt_installer.adapters.local_releases import LocalReleaseBackend
from plnt_local_backend import stop_all_runners
from plnt_local_backend.adapters.processes import pid_alive
from plnt_local_backend.settings import LocalBackendSettings

NS = "default"


def on(backend: str, *, digest: str, run: str) -> DesiredRelease:
    return desired_release(
        digest=digest, release=f"{run}-g1", run_name=run, saga_id=f"default.{run}.1.1"
    ).model_copy(update={"backend_name": backend})


async def ready(releases: LocalReleaseBackend, record: DesiredRelease) -> ObservedRelease:
    return await releases.wait_ready(
        namespace=NS, release=record.release, saga_id=record.saga_id, timeout_s=20
    )


async def observed(bus: Bus, release: str) -> ObservedRelease | None:
    try:
        entry = await bus.releases.get(observed_key(NS, release))
    except Exception:
        return None
    return ObservedRelease.model_validate_json(entry.value or b"")


async def test_each_backend_runs_only_its_own_releases_once_under_its_own_dir(
    start_local_backend: StartBackend,
    releases: LocalReleaseBackend,
    spec: str,
    data_dir: Path,
) -> None:
    await start_local_backend(backend="east")
    await start_local_backend(backend="west")
    east, west = on("east", digest=spec, run="a"), on("west", digest=spec, run="b")
    await releases.install(east)
    await releases.install(west)

    east_seen, west_seen = await ready(releases, east), await ready(releases, west)

    assert runner_starts(data_dir / "east", east.release) == [east_seen.pid]
    assert runner_starts(data_dir / "west", west.release) == [west_seen.pid]
    # Nobody else started one: no double start, nothing in the shared root.
    assert runner_starts(data_dir / "west", east.release) == []
    assert runner_starts(data_dir / "east", west.release) == []
    assert not (data_dir / "releases").exists()
    assert (east_seen.backend_name, west_seen.backend_name) == ("east", "west")


async def test_a_restarted_backend_cleans_up_its_own_undesired_release_and_nothing_of_others(
    start_local_backend: StartBackend,
    releases: LocalReleaseBackend,
    bus: Bus,
    spec: str,
    data_dir: Path,
) -> None:
    first_east = await start_local_backend(backend="east")
    await start_local_backend(backend="west")
    east, west = on("east", digest=spec, run="a"), on("west", digest=spec, run="b")
    await releases.install(east)
    await releases.install(west)
    east_pid = (await ready(releases, east)).pid
    west_seen = await ready(releases, west)

    await first_east.stop()  # runners survive; then its release is deleted while it is away
    await bus.releases.delete(desired_key(NS, east.release))
    await start_local_backend(backend="east")

    east_dir = data_dir / "east" / "releases" / NS / east.release

    async def east_torn_down() -> bool:
        return not pid_alive(east_pid, reap=True) and not east_dir.exists()

    await eventually(east_torn_down, what="east's runner stopped and its dir removed")
    # West's runner, directory and observed record are untouched.
    assert pid_alive(west_seen.pid)
    assert (data_dir / "west" / "releases" / NS / west.release / "runner.pid").exists()
    assert await observed(bus, west.release) == west_seen


async def test_without_a_backend_one_process_runs_the_releases_of_every_backend(
    start_local_backend: StartBackend, releases: LocalReleaseBackend, spec: str, data_dir: Path
) -> None:
    await start_local_backend()
    record = on("east", digest=spec, run="a")
    await releases.install(record)

    seen = await ready(releases, record)

    assert runner_starts(data_dir, record.release) == [seen.pid]


async def test_stop_all_runners_stops_every_backends_runners_or_only_its_own(
    start_local_backend: StartBackend, releases: LocalReleaseBackend, spec: str, data_dir: Path
) -> None:
    backends = [await start_local_backend(backend=name) for name in ("east", "west")]
    east, west = on("east", digest=spec, run="a"), on("west", digest=spec, run="b")
    await releases.install(east)
    await releases.install(west)
    east_pid, west_pid = (await ready(releases, east)).pid, (await ready(releases, west)).pid
    for backend in backends:
        await backend.stop()

    assert stop_all_runners(data_dir / "east", grace_s=2, every_backend=False) == [east_pid]
    assert pid_alive(west_pid)
    assert stop_all_runners(data_dir, grace_s=2) == [west_pid]  # what plnt up does at stop


@pytest.mark.parametrize("name", ["Gpu", "gpu_east", "-east", "a/b", ""], ids=repr)
def test_a_backend_name_that_is_no_plntbackend_name_is_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="backend"):
        LocalBackendSettings(backend=name)


def test_a_backend_keeps_its_state_under_its_own_dir(tmp_path: Path) -> None:
    assert LocalBackendSettings(data_dir=tmp_path, backend="east").state_dir == tmp_path / "east"
    assert LocalBackendSettings(data_dir=tmp_path).state_dir == tmp_path
