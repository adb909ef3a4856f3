"""The installer keeps the previous revision at 0 % for ``spec.rollback.keepPreviousFor``:
the promotion's ``run.ready`` is deferred from check to check until its time plus the
window (a delivery after a crash resumes from the event's time), a revert ends the window
and retires the reverted revision instead. A real nats-server carries the events; the
backend is in memory."""

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, cast

import pytest
from installer_helm_support import RUN, RUN_NS, desired, spec_pulled
from nats.aio.msg import Msg
from test_installer_helm_handlers import MemoryBackend

from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.bus.saga import advance_latest_saga
from plnt_common.events import Envelope, EventType, RunReady, RunReverted, SpecPulled, new_event
from plnt_common.releases import DesiredRelease, ReleaseRole
from plnt_common.resources import Rollback
from plnt_common.status import Reason
from plnt_installer import keep
from plnt_installer.handlers import InstallerHandlers

SAGA = f"{RUN_NS}.{RUN}.2.1"


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    opened = await Bus.open(nats_url, service="test")
    yield opened
    await opened.close()


@pytest.fixture(autouse=True)
def quick_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keep, "CHECK_S", 0.1)


@pytest.fixture
def backend() -> MemoryBackend:
    return MemoryBackend("kube")


@pytest.fixture
def handlers(bus: Bus, backend: MemoryBackend) -> InstallerHandlers:
    return InstallerHandlers(
        bus=bus, backends={"kubernetes": backend}, ready_timeout_s=5, uninstall_timeout_s=5
    )


def event(kind: EventType, data: Any, sagaid: str = SAGA) -> Envelope:
    return new_event(
        kind, data, namespace=RUN_NS, name=RUN, sagaid=sagaid, generation=2, source="test"
    )


def pulled_keeping(keep: str | None) -> SpecPulled:
    pulled = spec_pulled(generation=2)
    spec = pulled.run.spec.model_copy(update={"rollback": Rollback(keep_previous_for=keep)})
    changed: SpecPulled = pulled.model_copy(
        update={"run": pulled.run.model_copy(update={"spec": spec})}
    )
    return changed


def release(generation: int, role: ReleaseRole) -> DesiredRelease:
    made: DesiredRelease = desired(spec_pulled(generation=generation))
    return made.model_copy(update={"role": role})


async def promoted_keeping(
    bus: Bus, backend: MemoryBackend, keep: str | None
) -> tuple[DesiredRelease, DesiredRelease, Envelope]:
    """g1 stable, g2 a canary promoted by the returned run.ready; the saga's spec keeps ``keep``."""
    await bus.publish(event(EventType.SPEC_PULLED, pulled_keeping(keep)))
    old, new = release(1, ReleaseRole.STABLE), release(2, ReleaseRole.CANARY)
    backend.held = {old.release: old, new.release: new}
    ready = RunReady(
        revision=new.revision, endpoint="http://router/x", previous_revision=old.revision
    )
    return old, new, event(EventType.RUN_READY, ready)


def a_delivery() -> Delivery:
    return Delivery(msg=cast(Msg, None), attempt=1)  # defer never touches the message


async def deliver_until_acked(handlers: InstallerHandlers, cause: Envelope) -> None:
    """What the consumer does: deliver again after each deferral, until one is acked."""
    while True:
        delivery = a_delivery()
        await handlers.handle(cause, delivery)
        if delivery.deferred_s is None:
            return
        await asyncio.sleep(delivery.deferred_s)


def handle(handlers: InstallerHandlers, cause: Envelope) -> "asyncio.Task[None]":
    return asyncio.create_task(deliver_until_acked(handlers, cause))


async def test_the_previous_release_is_kept_as_previous_for_the_window_then_retired(
    bus: Bus, handlers: InstallerHandlers, backend: MemoryBackend
) -> None:
    old, new, ready = await promoted_keeping(bus, backend, "1s")
    started = time.monotonic()
    holding = handle(handlers, ready)
    await asyncio.sleep(0.5)
    assert not holding.done()
    assert backend.held[old.release].role is ReleaseRole.PREVIOUS
    assert backend.held[new.release].role is ReleaseRole.STABLE
    await holding
    assert time.monotonic() - started >= 0.9
    assert list(backend.held) == [new.release]


@pytest.mark.parametrize(
    ("keep", "age_s", "held_s"),
    [
        pytest.param("2s", 5, (0.0, 0.5), id="after-the-window-retires-at-once"),
        pytest.param("3s", 2, (0.7, 1.8), id="inside-the-window-holds-what-is-left"),
    ],
)
async def test_a_redelivery_resumes_the_window_from_the_events_time(
    bus: Bus,
    handlers: InstallerHandlers,
    backend: MemoryBackend,
    keep: str,
    age_s: float,
    held_s: tuple[float, float],
) -> None:
    _, new, ready = await promoted_keeping(bus, backend, keep)
    redelivered = ready.model_copy(update={"time": ready.time - timedelta(seconds=age_s)})
    started = time.monotonic()
    await handle(handlers, redelivered)
    assert held_s[0] <= time.monotonic() - started < held_s[1]
    assert list(backend.held) == [new.release]


async def test_without_keep_the_previous_release_is_retired_at_promotion(
    bus: Bus, handlers: InstallerHandlers, backend: MemoryBackend
) -> None:
    _, new, ready = await promoted_keeping(bus, backend, None)
    await asyncio.wait_for(handle(handlers, ready), timeout=0.5)
    previous = "default-review-responder-g1"
    assert backend.calls == [f"install {new.release} stable", f"uninstall {previous}"]


async def test_a_revert_ends_the_hold_retires_the_reverted_and_keeps_the_previous_serving(
    bus: Bus, handlers: InstallerHandlers, backend: MemoryBackend
) -> None:
    old, new, ready = await promoted_keeping(bus, backend, "30s")
    holding = handle(handlers, ready)
    await asyncio.sleep(0.3)
    reverted = RunReverted(
        revision=old.revision,
        reverted_revision=new.revision,
        reason=Reason.ROLLBACK_REQUESTED,
    )
    await handle(handlers, event(EventType.RUN_REVERTED, reverted, sagaid=f"{RUN_NS}.{RUN}.2.2"))
    await asyncio.wait_for(holding, timeout=2)
    assert backend.held == {old.release: old}  # stable again, never retired


async def test_a_revert_recorded_before_its_run_reverted_arrives_is_never_undone(
    bus: Bus, handlers: InstallerHandlers, backend: MemoryBackend
) -> None:
    old, _, ready = await promoted_keeping(bus, backend, "1s")
    await advance_latest_saga(bus, RUN_NS, RUN, SAGA)
    holding = handle(handlers, ready)
    await asyncio.sleep(0.3)
    # the promoter moved the route back to the kept release; run.reverted is still to come
    await advance_latest_saga(bus, RUN_NS, RUN, f"{RUN_NS}.{RUN}.2.2")
    await asyncio.wait_for(holding, timeout=2)
    assert backend.held[old.release].role is ReleaseRole.PREVIOUS  # kept, not retired


async def test_a_replayed_run_ready_of_a_reverted_saga_leaves_the_stable_installed(
    bus: Bus, handlers: InstallerHandlers, backend: MemoryBackend
) -> None:
    # the Ready saga was reverted: its attempt 2 is the latest, the kept g1 serves as the
    # stable again and g2 is gone; a redelivery of the old run.ready (a durable re-created
    # from an old position, say) must not retire g1 nor bring g2 back
    old, _, ready = await promoted_keeping(bus, backend, None)
    await advance_latest_saga(bus, RUN_NS, RUN, f"{RUN_NS}.{RUN}.2.2")
    backend.held = {old.release: old}
    await asyncio.wait_for(handle(handlers, ready), timeout=2)
    assert backend.held == {old.release: old}
    assert backend.calls == []


async def test_a_late_run_reverted_of_a_superseded_saga_leaves_the_releases_alone(
    bus: Bus, handlers: InstallerHandlers, backend: MemoryBackend
) -> None:
    # the revert's saga (attempt 2) was superseded by generation 3, which serves: a late
    # run.reverted must not make the kept g1 the stable again
    old, new = release(1, ReleaseRole.PREVIOUS), release(2, ReleaseRole.STABLE)
    backend.held = {old.release: old, new.release: new}
    await advance_latest_saga(bus, RUN_NS, RUN, f"{RUN_NS}.{RUN}.3.1")
    reverted = RunReverted(
        revision=old.revision, reverted_revision=new.revision, reason=Reason.ROLLBACK_REQUESTED
    )
    late = event(EventType.RUN_REVERTED, reverted, sagaid=f"{RUN_NS}.{RUN}.2.2")
    await asyncio.wait_for(handle(handlers, late), timeout=2)
    assert backend.calls == []


async def test_a_kept_release_holds_no_delivery_it_is_deferred_to_the_next_check(
    bus: Bus, handlers: InstallerHandlers, backend: MemoryBackend
) -> None:
    old, _, ready = await promoted_keeping(bus, backend, "1h")
    delivery = a_delivery()
    await asyncio.wait_for(handlers.handle(ready, delivery), timeout=2)
    assert delivery.deferred_s == keep.CHECK_S
    assert backend.held[old.release].role is ReleaseRole.PREVIOUS


async def test_a_restarted_installer_retires_the_kept_release_at_the_original_deadline(
    bus: Bus, handlers: InstallerHandlers, backend: MemoryBackend
) -> None:
    old, new, ready = await promoted_keeping(bus, backend, "1500ms")
    started = time.monotonic()
    first = a_delivery()
    await handlers.handle(ready, first)
    assert first.deferred_s is not None
    await asyncio.sleep(0.8)  # the installer stops mid-window; a new one gets the redelivery
    restarted = InstallerHandlers(
        bus=bus, backends={"kubernetes": backend}, ready_timeout_s=5, uninstall_timeout_s=5
    )
    await asyncio.wait_for(deliver_until_acked(restarted, ready), timeout=3)
    # the window is the event's time plus 1.5 s, not 1.5 s from the restart
    assert 1.4 <= time.monotonic() - started < 1.5 + 0.8 - 0.1
    assert list(backend.held) == [new.release]
    assert old.release not in backend.held
