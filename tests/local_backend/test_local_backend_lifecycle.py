"""Install, serve, restart, replace and uninstall releases through the real local-backend.

Each test drives the installer's ``LocalReleaseBackend`` against a real nats-server, with
the local-backend running in the test's loop and starting real runner processes.
"""

import os
import signal
from pathlib import Path

import pytest
from local_backend_support import (
    StartBackend,
    desired_release,
    eventually,
    fake_runner_command,
    http_get,
    process_gone,
    runner_starts,
)
from nats.js.errors import KeyDeletedError, KeyNotFoundError

from plnt_common.bus.bus import Bus
from plnt_common.errors import InstallFailed
from plnt_common.releases import (
    LlmConfig,
    ObservedRelease,
    ReleasePhase,
    ReleaseRole,
    desired_key,
    observed_key,
)
from plnt_installer.adapters.local_releases import LocalReleaseBackend

NS = "default"
RELEASE = "review-responder-g1"


async def _ready(
    releases: LocalReleaseBackend, *, saga_id: str = "default.review-responder.1.1"
) -> ObservedRelease:
    return await releases.wait_ready(namespace=NS, release=RELEASE, saga_id=saga_id, timeout_s=20)


async def test_install_starts_one_runner_that_serves_and_reports_ready_with_its_url(
    start_local_backend: StartBackend,
    releases: LocalReleaseBackend,
    spec: str,
    data_dir: Path,
) -> None:
    await start_local_backend()
    await releases.install(desired_release(digest=spec))

    observed = await _ready(releases)

    assert observed.phase is ReleasePhase.READY
    assert observed.url.startswith("http://127.0.0.1:")
    assert observed.restarts == 0
    assert not process_gone(observed.pid)
    status, info = await http_get(f"{observed.url}/info")
    assert status == 200
    assert info["pid"] == observed.pid
    assert info["revision"] == "1.2.0-g1"
    assert info["session_leader"] is True  # survives a Ctrl-C to the parent's group
    assert "review-responder" in info["workflow"]
    assert (await http_get(f"{observed.url}/healthz"))[0] == 200
    release_dir = data_dir / "releases" / NS / RELEASE
    assert (release_dir / "runner.pid").read_text().strip() == str(observed.pid)
    assert (release_dir / "runner.log").exists()
    assert runner_starts(data_dir, RELEASE) == [observed.pid]
    assert await releases.status(namespace=NS, release=RELEASE) == observed


async def test_uninstall_stops_the_runner_and_removes_both_keys_and_the_directory(
    start_local_backend: StartBackend,
    releases: LocalReleaseBackend,
    bus: Bus,
    spec: str,
    data_dir: Path,
) -> None:
    await start_local_backend()
    await releases.install(desired_release(digest=spec))
    observed = await _ready(releases)

    removed = await releases.uninstall(namespace=NS, release=RELEASE, timeout_s=20)

    assert removed is True
    assert process_gone(observed.pid)
    assert await releases.status(namespace=NS, release=RELEASE) is None
    assert await releases.releases(namespace=NS, run_name="review-responder") == []
    assert not (data_dir / "releases" / NS / RELEASE).exists()
    for key in (desired_key(NS, RELEASE), observed_key(NS, RELEASE)):
        with pytest.raises((KeyNotFoundError, KeyDeletedError)):
            await bus.releases.get(key)
    assert await releases.uninstall(namespace=NS, release=RELEASE, timeout_s=5) is False


async def test_uninstall_kills_a_runner_that_ignores_sigterm_after_the_grace_period(
    start_local_backend: StartBackend, releases: LocalReleaseBackend, spec: str
) -> None:
    await start_local_backend(
        runner_command=fake_runner_command("--ignore-sigterm"), stop_grace_s=0.5
    )
    await releases.install(desired_release(digest=spec))
    observed = await _ready(releases)

    assert await releases.uninstall(namespace=NS, release=RELEASE, timeout_s=20) is True

    assert process_gone(observed.pid)


async def test_a_killed_runner_is_restarted_on_a_new_pid_and_the_restart_is_counted(
    start_local_backend: StartBackend,
    releases: LocalReleaseBackend,
    spec: str,
    data_dir: Path,
) -> None:
    await start_local_backend()
    await releases.install(desired_release(digest=spec))
    first = await _ready(releases)

    os.kill(first.pid, signal.SIGKILL)

    async def restarted() -> ObservedRelease | None:
        now = await releases.status(namespace=NS, release=RELEASE)
        ok = now and now.phase is ReleasePhase.READY and now.pid != first.pid
        return now if ok else None

    second = await eventually(restarted, what="the runner to be restarted")
    assert second.restarts == 1
    assert (await http_get(f"{second.url}/healthz"))[0] == 200
    assert runner_starts(data_dir, RELEASE) == [first.pid, second.pid]


async def test_a_runner_that_keeps_crashing_is_reported_failed_after_max_restarts(
    start_local_backend: StartBackend,
    releases: LocalReleaseBackend,
    spec: str,
    data_dir: Path,
) -> None:
    await start_local_backend(runner_command=fake_runner_command("--crash"), max_restarts=2)
    await releases.install(desired_release(digest=spec))

    with pytest.raises(InstallFailed, match="gave up after 3 failed starts in a row") as failed:
        await _ready(releases)

    assert "exited with code 3" in str(failed.value)
    assert "last log lines: fake runner: crashing on purpose" in str(failed.value)
    observed = await releases.status(namespace=NS, release=RELEASE)
    assert observed is not None
    assert observed.phase is ReleasePhase.FAILED
    assert observed.restarts == 2
    assert len(runner_starts(data_dir, RELEASE)) == 3


async def test_a_runner_that_never_answers_healthz_fails_wait_ready_with_a_timeout(
    start_local_backend: StartBackend, releases: LocalReleaseBackend, spec: str
) -> None:
    await start_local_backend(
        runner_command=fake_runner_command("--never-healthy"), ready_timeout_s=30
    )
    await releases.install(desired_release(digest=spec))

    with pytest.raises(InstallFailed) as failed:
        await releases.wait_ready(
            namespace=NS, release=RELEASE, saga_id="default.review-responder.1.1", timeout_s=1.5
        )

    message = str(failed.value)
    assert f"{NS}/{RELEASE}" in message
    assert "not ready after 1.5s" in message
    assert "Starting" in message
    observed = await releases.status(namespace=NS, release=RELEASE)
    assert observed is not None
    assert observed.phase is ReleasePhase.STARTING


async def test_the_local_backend_replaces_a_runner_that_misses_its_ready_timeout(
    start_local_backend: StartBackend, releases: LocalReleaseBackend, spec: str
) -> None:
    await start_local_backend(
        runner_command=fake_runner_command("--never-healthy"), ready_timeout_s=0.8, max_restarts=1
    )
    await releases.install(desired_release(digest=spec))

    with pytest.raises(InstallFailed, match=r"did not answer .*/healthz within 0\.8s"):
        await _ready(releases)

    observed = await releases.status(namespace=NS, release=RELEASE)
    assert observed is not None
    assert observed.restarts == 1


async def test_a_missing_spec_is_reported_failed_and_wait_ready_raises_its_message(
    start_local_backend: StartBackend, releases: LocalReleaseBackend
) -> None:
    await start_local_backend()
    missing = "sha256:" + "0" * 64
    await releases.install(desired_release(digest=missing))

    with pytest.raises(InstallFailed, match=f"spec {missing} is not in the object store"):
        await _ready(releases)

    observed = await releases.status(namespace=NS, release=RELEASE)
    assert observed is not None
    assert observed.phase is ReleasePhase.FAILED
    assert observed.pid == 0


async def test_a_role_only_change_keeps_the_same_runner_process(
    start_local_backend: StartBackend,
    releases: LocalReleaseBackend,
    spec: str,
    data_dir: Path,
) -> None:
    await start_local_backend()
    canary = desired_release(digest=spec)
    await releases.install(canary)
    before = await _ready(releases)

    await releases.install(canary.model_copy(update={"role": ReleaseRole.STABLE}))
    # A later saga id change is not a launch change either; once it is observed, the
    # role change written before it has been handled too.
    await releases.install(
        canary.model_copy(
            update={"role": ReleaseRole.STABLE, "saga_id": "default.review-responder.1.2"}
        )
    )
    after = await _ready(releases, saga_id="default.review-responder.1.2")

    assert after.pid == before.pid
    assert after.url == before.url
    assert runner_starts(data_dir, RELEASE) == [before.pid]


async def test_a_revision_change_replaces_the_runner(
    start_local_backend: StartBackend,
    releases: LocalReleaseBackend,
    spec: str,
    data_dir: Path,
) -> None:
    await start_local_backend()
    first = desired_release(digest=spec)
    await releases.install(first)
    before = await _ready(releases)

    await releases.install(
        first.model_copy(update={"revision": "1.2.1-g1", "saga_id": "default.review-responder.1.2"})
    )
    after = await _ready(releases, saga_id="default.review-responder.1.2")

    assert after.pid != before.pid
    assert after.revision == "1.2.1-g1"
    assert after.restarts == 0
    assert process_gone(before.pid)
    assert (await http_get(f"{after.url}/info"))[1]["revision"] == "1.2.1-g1"
    assert runner_starts(data_dir, RELEASE) == [before.pid, after.pid]


async def test_the_llm_api_key_travels_from_the_named_variable_to_the_runner(
    start_local_backend: StartBackend,
    releases: LocalReleaseBackend,
    spec: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PLNT_TEST_LLM_KEY", "sk-test-123")
    await start_local_backend()
    llm = LlmConfig(base_url="http://127.0.0.1:9/v1", model="m-1", api_key_env="PLNT_TEST_LLM_KEY")
    await releases.install(desired_release(digest=spec, llm=llm))

    observed = await _ready(releases)

    _, info = await http_get(f"{observed.url}/info")
    assert info["llm_api_key"] == "sk-test-123"
    assert info["llm_base_url"] == "http://127.0.0.1:9/v1"
    assert info["llm_model"] == "m-1"


async def test_an_unset_llm_api_key_variable_fails_the_release_naming_the_variable(
    start_local_backend: StartBackend,
    releases: LocalReleaseBackend,
    spec: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PLNT_TEST_UNSET_KEY", raising=False)
    await start_local_backend()
    llm = LlmConfig(base_url="http://127.0.0.1:9/v1", api_key_env="PLNT_TEST_UNSET_KEY")
    await releases.install(desired_release(digest=spec, llm=llm))

    with pytest.raises(InstallFailed, match="PLNT_TEST_UNSET_KEY"):
        await _ready(releases)


async def test_releases_lists_the_desired_records_of_one_run_only(
    start_local_backend: StartBackend, releases: LocalReleaseBackend, spec: str
) -> None:
    await start_local_backend()
    g1 = desired_release(digest=spec, release="review-responder-g1")
    g2 = desired_release(
        digest=spec, release="review-responder-g2", saga_id="default.review-responder.2.1"
    )
    other = desired_release(
        digest=spec, release="other-g1", run_name="other", saga_id="default.other.1.1"
    )
    for record in (g1, g2, other):
        await releases.install(record)

    listed = await releases.releases(namespace=NS, run_name="review-responder")

    assert listed == [g1, g2]
    for record in (g1, g2, other):
        await releases.wait_ready(
            namespace=NS, release=record.release, saga_id=record.saga_id, timeout_s=20
        )
        assert await releases.uninstall(namespace=NS, release=record.release, timeout_s=20)
