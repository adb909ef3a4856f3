"""The installer's removal of a deleted run over the local backend: ``run.removed`` is
published only once the local-backend confirmed every release gone, also when an earlier
attempt timed out after deleting the desired records (a retry no longer finds them there).
A real nats-server; no local-backend runs, the test writes and deletes its observed records."""

from collections import Counter
from typing import cast

import pytest
from local_backend_support import desired_release
from nats.aio.msg import Msg

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.bus.history import read_events
from plnt_common.events import EventType, RunDeleted, RunRemoved, new_event
from plnt_common.releases import ObservedRelease, ReleasePhase, observed_key
from plnt_installer.adapters.local_releases import LocalReleaseBackend, UninstallTimedOut
from plnt_installer.handlers import InstallerHandlers

NS = "default"
RUN = "review-responder"
DIGEST = "sha256:" + "c" * 64


def a_delivery() -> Delivery:
    return Delivery(msg=cast(Msg, None), attempt=1)  # removal never defers


async def removals(bus: Bus) -> list[RunRemoved]:
    found = []
    async for stored in read_events(bus.nc, filter_subject=subjects.run_filter(NS, RUN)):
        assert stored.event is not None
        if stored.event.event_type is EventType.RUN_REMOVED:
            found.append(stored.event.payload())
    return found


async def test_a_removal_retried_after_a_timeout_waits_for_the_release_it_asked_to_remove(
    bus: Bus, releases: LocalReleaseBackend
) -> None:
    record = desired_release(digest=DIGEST)
    await releases.install(record)
    observed = ObservedRelease(
        namespace=NS,
        release=record.release,
        revision=record.revision,
        saga_id=record.saga_id,
        phase=ReleasePhase.READY,
        run_name=RUN,
        pid=7,
    )
    await bus.releases.put(observed_key(NS, record.release), observed.model_dump_json().encode())
    handlers = InstallerHandlers(
        bus=bus, backends={"local": releases}, ready_timeout_s=5, uninstall_timeout_s=0.5
    )
    deleted = new_event(
        EventType.RUN_DELETED,
        RunDeleted(),
        namespace=NS,
        name=RUN,
        sagaid=f"{NS}.{RUN}.1.2",
        generation=1,
        source="test",
    )

    # the first attempt deletes the desired record; nothing confirms, and neither does the
    # retry, which finds no desired record left
    for attempt in ("first", "retry"):
        with pytest.raises(UninstallTimedOut, match=record.release):
            await handlers.handle(deleted, a_delivery())
        assert await removals(bus) == [], f"run.removed published on the {attempt} attempt"

    await bus.releases.delete(observed_key(NS, record.release))
    await handlers.handle(deleted, a_delivery())

    # (this attempt removed nothing itself: the names are those an attempt found)
    assert await removals(bus) == [RunRemoved(releases_removed=())]
    kinds = Counter[EventType]()
    async for stored in read_events(bus.nc, filter_subject=subjects.run_filter(NS, RUN)):
        assert stored.event is not None
        kinds[stored.event.event_type] += 1
    assert kinds == {EventType.RUN_REMOVED: 1}
