"""``LocalReleaseBackend`` against a real nats-server, with observed records written by hand.

No local-backend runs here: the test plays its part by writing ``observed.*`` keys, so
the adapter's matching rules (saga, revision, phase, deletion) are pinned exactly.
"""

import asyncio

import pytest
from local_backend_support import desired_release

from plnt_common.bus.bus import Bus
from plnt_common.errors import InstallFailed
from plnt_common.releases import (
    DesiredRelease,
    ObservedRelease,
    ReleasePhase,
    desired_key,
    observed_key,
)
from plnt_installer.adapters.local_releases import LocalReleaseBackend, UninstallTimedOut

NS = "default"
RELEASE = "review-responder-g1"
SAGA = "default.review-responder.1.1"
DIGEST = "sha256:" + "c" * 64


def _observed(
    record: DesiredRelease, phase: ReleasePhase, *, saga_id: str | None = None, **fields: object
) -> ObservedRelease:
    return ObservedRelease(
        namespace=record.namespace,
        release=record.release,
        revision=str(fields.pop("revision", record.revision)),
        saga_id=saga_id or record.saga_id,
        phase=phase,
        **fields,
    )


async def _write(bus: Bus, record: ObservedRelease) -> None:
    await bus.releases.put(
        observed_key(record.namespace, record.release), record.model_dump_json().encode()
    )


async def test_install_writes_the_desired_record_and_status_is_none_until_observed(
    bus: Bus, releases: LocalReleaseBackend
) -> None:
    record = desired_release(digest=DIGEST)

    await releases.install(record)

    entry = await bus.releases.get(desired_key(NS, RELEASE))
    assert DesiredRelease.model_validate_json(entry.value or b"") == record
    assert await releases.status(namespace=NS, release=RELEASE) is None


async def test_wait_ready_ignores_other_sagas_and_revisions_until_its_own_ready_arrives(
    bus: Bus, releases: LocalReleaseBackend
) -> None:
    record = desired_release(digest=DIGEST)
    await releases.install(record)
    await _write(bus, _observed(record, ReleasePhase.FAILED, saga_id="older", message="old"))
    waiting = asyncio.create_task(
        releases.wait_ready(namespace=NS, release=RELEASE, saga_id=SAGA, timeout_s=10)
    )
    await asyncio.sleep(0.3)
    await _write(bus, _observed(record, ReleasePhase.READY, revision="0.9.0-g0"))
    await _write(bus, _observed(record, ReleasePhase.STARTING))
    await asyncio.sleep(0.3)
    assert not waiting.done()

    ready = _observed(record, ReleasePhase.READY, url="http://127.0.0.1:1", pid=7)
    await _write(bus, ready)

    assert await asyncio.wait_for(waiting, timeout=5) == ready


async def test_wait_ready_raises_the_observed_message_when_its_saga_failed(
    bus: Bus, releases: LocalReleaseBackend
) -> None:
    record = desired_release(digest=DIGEST)
    await releases.install(record)
    await _write(bus, _observed(record, ReleasePhase.FAILED, message="spec is missing"))

    with pytest.raises(InstallFailed, match=f"release {NS}/{RELEASE} failed: spec is missing"):
        await releases.wait_ready(namespace=NS, release=RELEASE, saga_id=SAGA, timeout_s=5)


async def test_wait_ready_times_out_naming_the_release_and_the_timeout(
    releases: LocalReleaseBackend,
) -> None:
    await releases.install(desired_release(digest=DIGEST))

    with pytest.raises(InstallFailed) as failed:
        await releases.wait_ready(namespace=NS, release=RELEASE, saga_id=SAGA, timeout_s=0.5)

    assert str(failed.value) == (
        f"release {NS}/{RELEASE} was not ready after 0.5s (last state: nothing observed)"
    )


@pytest.mark.parametrize(
    ("installed", "match"),
    [(False, "no desired record"), (True, "desired by saga other-saga")],
    ids=["not-installed", "superseded"],
)
async def test_wait_ready_fails_at_once_when_the_release_is_not_desired_by_its_saga(
    releases: LocalReleaseBackend, installed: bool, match: str
) -> None:
    if installed:
        await releases.install(desired_release(digest=DIGEST, saga_id="other-saga"))

    with pytest.raises(InstallFailed, match=match):
        await releases.wait_ready(namespace=NS, release=RELEASE, saga_id=SAGA, timeout_s=30)


async def test_uninstall_of_an_unknown_release_returns_false(
    releases: LocalReleaseBackend,
) -> None:
    assert await releases.uninstall(namespace=NS, release=RELEASE, timeout_s=1) is False


async def test_uninstall_waits_for_the_observed_record_to_disappear(
    bus: Bus, releases: LocalReleaseBackend
) -> None:
    record = desired_release(digest=DIGEST)
    await releases.install(record)
    await _write(bus, _observed(record, ReleasePhase.READY, pid=7))
    removing = asyncio.create_task(releases.uninstall(namespace=NS, release=RELEASE, timeout_s=10))
    await asyncio.sleep(0.3)
    assert not removing.done()
    assert await releases.releases(namespace=NS, run_name=record.run_name) == []

    await bus.releases.delete(observed_key(NS, RELEASE))

    assert await asyncio.wait_for(removing, timeout=5) is True


async def test_uninstall_raises_a_retryable_error_when_nothing_confirms_the_removal(
    bus: Bus, releases: LocalReleaseBackend
) -> None:
    record = desired_release(digest=DIGEST)
    await releases.install(record)
    await _write(bus, _observed(record, ReleasePhase.READY, pid=7))

    with pytest.raises(UninstallTimedOut, match="is the local-backend running") as timed_out:
        await releases.uninstall(namespace=NS, release=RELEASE, timeout_s=0.5)

    assert timed_out.value.retryable
    # Retried, it waits for the observed record again, though the desired one is gone.
    retry = asyncio.create_task(releases.uninstall(namespace=NS, release=RELEASE, timeout_s=10))
    await asyncio.sleep(0.3)
    assert not retry.done()
    await bus.releases.delete(observed_key(NS, RELEASE))
    assert await asyncio.wait_for(retry, timeout=5) is True


async def test_releases_lists_desired_records_of_one_run_in_one_namespace(
    releases: LocalReleaseBackend,
) -> None:
    mine = [
        desired_release(digest=DIGEST, release="review-responder-g2", saga_id="s2"),
        desired_release(digest=DIGEST, release="review-responder-g1", saga_id="s1"),
    ]
    others = [
        desired_release(digest=DIGEST, release="other-g1", run_name="other"),
        desired_release(digest=DIGEST, namespace="team-b"),
    ]
    for record in mine + others:
        await releases.install(record)

    listed = await releases.releases(namespace=NS, run_name="review-responder")

    assert listed == sorted(mine, key=lambda r: r.release)
    assert await releases.releases(namespace="empty", run_name="review-responder") == []


async def test_still_removing_lists_the_runs_releases_observed_without_a_desired_record(
    bus: Bus, releases: LocalReleaseBackend
) -> None:
    serving = desired_release(digest=DIGEST, release="review-responder-g2", saga_id="s2")
    await releases.install(serving)
    await _write(bus, _observed(serving, ReleasePhase.READY, run_name=serving.run_name))
    stopping = desired_release(digest=DIGEST, release="review-responder-g1", saga_id="s1")
    await _write(bus, _observed(stopping, ReleasePhase.READY, run_name=stopping.run_name))
    for other in (
        desired_release(digest=DIGEST, release="other-g1", run_name="other"),
        desired_release(digest=DIGEST, namespace="team-b"),
    ):
        await _write(bus, _observed(other, ReleasePhase.READY, run_name=other.run_name))

    removing = await releases.still_removing(namespace=NS, run_name="review-responder")

    assert removing == ["review-responder-g1"]
    await bus.releases.delete(observed_key(NS, "review-responder-g1"))
    assert await releases.still_removing(namespace=NS, run_name="review-responder") == []
