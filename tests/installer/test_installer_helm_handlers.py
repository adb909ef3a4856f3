"""Installer handlers with several backends: each act lands on the backend holding the
release, and an install passes the run's spec.pulled (its PlntBackend) to the backend.

A real nats-server carries the events; the backends are in-memory ``ReleaseBackend``s
that record what they were told (the adapters have their own tests).
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import pytest
from installer_helm_support import (
    RUN,
    RUN_NS,
    desired,
    promoted,
    spec_pulled,
)
from nats.aio.msg import Msg

from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.bus.history import read_events
from plnt_common.bus.saga import advance_latest_saga
from plnt_common.errors import InstallFailed
from plnt_common.events import (
    Envelope,
    EventType,
    RunDeleted,
    RunFailed,
    RunReady,
    RunReverted,
    SpecPulled,
    new_event,
)
from plnt_common.events import InstallFailed as InstallFailedEvent
from plnt_common.releases import (
    DesiredRelease,
    ObservedRelease,
    ReleasePhase,
    ReleaseRole,
)
from plnt_common.status import Phase, Reason
from plnt_installer.handlers import InstallerHandlers
from plnt_installer.ports import ReleasesUnreadable
from plnt_installer.silent_backends import UNREADABLE_RETRY_S

SILENT = "gpu-far"
"""The kubernetes PlntBackend whose API stops answering."""


class MemoryBackend:
    """A ``ReleaseBackend`` in a dict."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.held: dict[str, DesiredRelease] = {}
        self.calls: list[str] = []
        self.refuse: str = ""
        self.installed_onto: list[str] = []
        """The PlntBackend of each install that passed its spec.pulled."""
        self.while_waiting: Callable[[], Awaitable[object]] | None = None
        """What happens elsewhere while an install waits for readiness."""
        self.never_ready = False
        """A runner that never answers: wait_ready waits out its timeout, then fails."""
        self.waited: list[float] = []
        """The timeout of each wait_ready."""
        self.silent: dict[str, DesiredRelease] = {}
        """Releases on a cluster whose API does not answer: unlisted, out of reach."""
        self.silent_name = SILENT
        """The PlntBackend named silent while ``silent`` holds releases."""

    async def install(self, release: DesiredRelease, *, pulled: SpecPulled | None = None) -> None:
        self.calls.append(f"install {release.release} {release.role.value}")
        if pulled is not None:
            self.installed_onto.append(pulled.backend_name)
        if self.refuse:
            raise InstallFailed(self.refuse)
        self.held[release.release] = release

    async def wait_ready(
        self,
        *,
        namespace: str,
        release: str,
        saga_id: str,
        timeout_s: float,
        pulled: SpecPulled | None = None,
    ) -> ObservedRelease:
        self.waited.append(timeout_s)
        if self.while_waiting is not None:
            await self.while_waiting()
        if self.never_ready:
            await asyncio.sleep(timeout_s)
            raise InstallFailed(f"release {release} was not ready after {timeout_s:g}s")
        held = self.held[release]
        return ObservedRelease(
            namespace=namespace,
            release=release,
            revision=held.revision,
            saga_id=saga_id,
            phase=ReleasePhase.READY,
            url=f"http://{self.name}/{release}",
        )

    async def uninstall(
        self, *, namespace: str, release: str, timeout_s: float, pulled: SpecPulled | None = None
    ) -> bool:
        self.calls.append(f"uninstall {release}")
        return self.held.pop(release, None) is not None

    async def releases(self, *, namespace: str, run_name: str) -> list[DesiredRelease]:
        found = sorted(
            (r for r in self.held.values() if (r.namespace, r.run_name) == (namespace, run_name)),
            key=lambda r: r.release,
        )
        if self.silent:
            raise ReleasesUnreadable(found=found, backends=(self.silent_name,))
        return found

    def answers_again(self) -> None:
        """The silent cluster's API is back: its releases are listed again."""
        self.held.update(self.silent)
        self.silent = {}

    async def every_release(self, *, pulled: SpecPulled) -> list[DesiredRelease]:
        return list(self.held.values())

    async def still_removing(self, *, namespace: str, run_name: str) -> list[str]:
        return []

    async def status(self, *, namespace: str, release: str) -> ObservedRelease | None:
        return None


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    opened = await Bus.open(nats_url, service="test")
    yield opened
    await opened.close()


@pytest.fixture
def local() -> MemoryBackend:
    return MemoryBackend("local")


@pytest.fixture
def kube() -> MemoryBackend:
    return MemoryBackend("kube")


@pytest.fixture
def handlers(bus: Bus, local: MemoryBackend, kube: MemoryBackend) -> InstallerHandlers:
    return InstallerHandlers(
        bus=bus,
        backends={"local": local, "kubernetes": kube},
        ready_timeout_s=5,
        uninstall_timeout_s=5,
    )


def _event(event_type: EventType, data: Any, *, generation: int) -> Envelope:
    return new_event(
        event_type,
        data,
        namespace=RUN_NS,
        name=RUN,
        sagaid=f"{RUN_NS}.{RUN}.{generation}.1",
        generation=generation,
        source="test",
    )


async def _handle(handlers: InstallerHandlers, event: Envelope) -> None:
    await handlers.handle(event, cast(Delivery, None))  # the handlers never touch delivery


def _delivery() -> Delivery:
    return Delivery(msg=cast(Msg, None), attempt=1)  # defer never touches the message


async def _published(bus: Bus) -> list[tuple[EventType, dict[str, Any]]]:
    return [
        (stored.event.event_type, stored.event.data)
        async for stored in read_events(bus.nc)
        if stored.event is not None
    ]


def _release(generation: int, *, role: ReleaseRole = ReleaseRole.CANARY) -> DesiredRelease:
    return desired(spec_pulled(generation=generation)).model_copy(update={"role": role})


async def test_a_spec_for_a_kubernetes_backend_installs_onto_its_plntbackend(
    bus: Bus, handlers: InstallerHandlers, local: MemoryBackend, kube: MemoryBackend
) -> None:
    pulled = spec_pulled()

    await _handle(handlers, _event(EventType.SPEC_PULLED, pulled, generation=1))

    assert kube.installed_onto == [pulled.backend_name]
    assert kube.held == {"default-review-responder-g1": desired(pulled)}
    assert local.calls == []
    [(kind, data)] = await _published(bus)
    assert kind is EventType.CANARY_INSTALLED
    assert data["canary"]["url"] == "http://kube/default-review-responder-g1"


async def test_a_saga_superseded_while_its_canary_started_removes_it_and_rolls_back(
    bus: Bus, handlers: InstallerHandlers, kube: MemoryBackend
) -> None:
    newer = f"{RUN_NS}.{RUN}.2.1"
    kube.while_waiting = lambda: advance_latest_saga(bus, RUN_NS, RUN, newer)

    await _handle(handlers, _event(EventType.SPEC_PULLED, spec_pulled(), generation=1))

    assert kube.calls == [
        "install default-review-responder-g1 canary",
        "uninstall default-review-responder-g1",
    ]
    [(kind, data)] = await _published(bus)
    assert kind is EventType.RUN_ROLLED_BACK
    assert data["reason"] == Reason.SUPERSEDED.value


async def test_a_redelivered_install_of_a_saga_promoted_meanwhile_leaves_its_release(
    bus: Bus, handlers: InstallerHandlers, kube: MemoryBackend
) -> None:
    # spec.pulled comes back after a restart of the bus lost its ack; while the install
    # waits, the promoter ends the saga Ready: that release serves now
    pulled = spec_pulled()
    ready = RunReady(revision=desired(pulled).revision, endpoint="http://router/x/invoke")
    kube.while_waiting = lambda: bus.publish_terminal(
        _event(EventType.RUN_READY, ready, generation=1)
    )

    await _handle(handlers, _event(EventType.SPEC_PULLED, pulled, generation=1))

    # stable again: another replica's run.ready may have made it so before this install
    assert kube.calls == [
        "install default-review-responder-g1 canary",
        "install default-review-responder-g1 stable",
    ]
    assert kube.held == {"default-review-responder-g1": promoted(desired(pulled))}
    assert [kind for kind, _ in await _published(bus)] == [EventType.RUN_READY]


async def test_a_redelivered_install_of_a_promoted_saga_superseded_since_is_left_to_retire(
    bus: Bus, handlers: InstallerHandlers, kube: MemoryBackend
) -> None:
    # promoted, then a newer saga started: the release may still serve until that one is
    # promoted (which retires it), so it is neither removed nor made stable here
    pulled = spec_pulled()
    ready = RunReady(revision=desired(pulled).revision, endpoint="http://router/x/invoke")

    async def promoted_then_superseded() -> None:
        await bus.publish_terminal(_event(EventType.RUN_READY, ready, generation=1))
        await advance_latest_saga(bus, RUN_NS, RUN, f"{RUN_NS}.{RUN}.2.1")

    kube.while_waiting = promoted_then_superseded

    await _handle(handlers, _event(EventType.SPEC_PULLED, pulled, generation=1))

    assert kube.calls == ["install default-review-responder-g1 canary"]
    assert [kind for kind, _ in await _published(bus)] == [EventType.RUN_READY]


async def test_an_install_of_a_saga_that_failed_meanwhile_is_removed_again(
    bus: Bus, handlers: InstallerHandlers, kube: MemoryBackend
) -> None:
    # the saga timed out while it installed, and its compensation ran before the canary
    # landed: nothing else would remove it
    failed = RunFailed(reason=Reason.STEP_TIMED_OUT, message="late", phase=Phase.INSTALLING)
    kube.while_waiting = lambda: bus.publish_terminal(
        _event(EventType.RUN_FAILED, failed, generation=1)
    )

    await _handle(handlers, _event(EventType.SPEC_PULLED, spec_pulled(), generation=1))

    assert kube.calls == [
        "install default-review-responder-g1 canary",
        "uninstall default-review-responder-g1",
    ]
    assert kube.held == {}
    assert [kind for kind, _ in await _published(bus)] == [EventType.RUN_FAILED]


async def test_an_install_the_backend_refuses_publishes_install_failed_at_once(
    bus: Bus, handlers: InstallerHandlers, kube: MemoryBackend
) -> None:
    kube.refuse = "helm upgrade --install plnt-runners/default-review-responder-g1: execution error"

    await _handle(handlers, _event(EventType.SPEC_PULLED, spec_pulled(), generation=1))

    [(kind, data)] = await _published(bus)
    assert kind is EventType.INSTALL_FAILED
    assert data["message"] == kube.refuse
    assert data["release"] == "default-review-responder-g1"
    assert data["backend"] == spec_pulled().backend_name


async def test_a_runner_never_ready_fails_after_the_backends_ready_timeout_naming_it(
    bus: Bus, handlers: InstallerHandlers, kube: MemoryBackend
) -> None:
    kube.never_ready = True
    pulled = spec_pulled()
    pulled = pulled.model_copy(
        update={"backend": pulled.backend.model_copy(update={"ready_timeout": "1s"})}
    )

    await _handle(handlers, _event(EventType.SPEC_PULLED, pulled, generation=1))

    assert kube.waited == [1.0]  # the backend's, under the installer's cap of 5 s
    [(kind, data)] = await _published(bus)
    assert kind is EventType.INSTALL_FAILED
    assert data["message"].endswith(
        f"the timeout is spec.readyTimeout of PlntBackend {pulled.backend_name} (1s)"
    )


async def test_the_installers_cap_bounds_a_longer_backend_ready_timeout(
    bus: Bus, local: MemoryBackend, kube: MemoryBackend
) -> None:
    kube.never_ready = True
    capped = InstallerHandlers(
        bus=bus,
        backends={"local": local, "kubernetes": kube},
        ready_timeout_s=0.2,
        uninstall_timeout_s=5,
    )

    await _handle(capped, _event(EventType.SPEC_PULLED, spec_pulled(), generation=1))

    assert kube.waited == [0.2]  # not the backend's default 10m
    [(kind, data)] = await _published(bus)
    assert kind is EventType.INSTALL_FAILED
    assert "PLNT_INSTALLER_READY_TIMEOUT_S (0.2s" in data["message"]


async def test_compensation_removes_the_canary_from_the_backend_holding_it(
    bus: Bus, handlers: InstallerHandlers, local: MemoryBackend, kube: MemoryBackend
) -> None:
    stable, canary = _release(1, role=ReleaseRole.STABLE), _release(2)
    kube.held = {stable.release: stable, canary.release: canary}
    failed = InstallFailedEvent(
        reason=Reason.INSTALL_FAILED,
        message="not ready",
        revision=canary.revision,
        release=canary.release,
    )

    await _handle(handlers, _event(EventType.INSTALL_FAILED, failed, generation=2))

    assert kube.held == {stable.release: stable}
    assert local.calls == []
    [(kind, data)] = await _published(bus)
    assert kind is EventType.RUN_ROLLED_BACK
    assert (data["revision"], data["stable_revision"]) == (canary.revision, stable.revision)


async def test_compensation_of_a_canary_listed_nowhere_asks_every_backend_to_remove_it(
    bus: Bus, handlers: InstallerHandlers, local: MemoryBackend, kube: MemoryBackend
) -> None:
    failed = InstallFailedEvent(
        reason=Reason.INSTALL_FAILED, message="x", revision="1.2.0-g1", release="r"
    )

    await _handle(handlers, _event(EventType.INSTALL_FAILED, failed, generation=1))

    assert local.calls == kube.calls == ["uninstall default-review-responder-g1"]
    [(kind, _)] = await _published(bus)
    assert kind is EventType.RUN_FAILED


async def test_promotion_promotes_and_retires_each_release_where_it_is(
    bus: Bus, handlers: InstallerHandlers, local: MemoryBackend, kube: MemoryBackend
) -> None:
    # the run moved from the local backend (generation 1) to a kubernetes one (generation 2)
    old, canary = _release(1, role=ReleaseRole.STABLE), _release(2)
    local.held = {old.release: old}
    kube.held = {canary.release: canary}
    ready = RunReady(revision=canary.revision, endpoint="http://router/workflows/x/invoke")

    await _handle(handlers, _event(EventType.RUN_READY, ready, generation=2))

    assert kube.calls == ["install default-review-responder-g2 stable"]
    assert kube.held == {canary.release: promoted(canary)}
    assert local.calls == ["uninstall default-review-responder-g1"]
    assert local.held == {}


async def test_deletion_removes_every_release_on_every_backend(
    bus: Bus, handlers: InstallerHandlers, local: MemoryBackend, kube: MemoryBackend
) -> None:
    old, current = _release(1, role=ReleaseRole.STABLE), _release(2)
    local.held = {old.release: old}
    kube.held = {current.release: current}

    await _handle(handlers, _event(EventType.RUN_DELETED, RunDeleted(), generation=3))

    assert local.held == kube.held == {}
    [(kind, data)] = await _published(bus)
    assert kind is EventType.RUN_REMOVED
    assert sorted(data["releases_removed"]) == [old.release, current.release]


async def test_a_promotion_retires_what_answers_and_comes_back_for_a_silent_clusters_copy(
    bus: Bus, handlers: InstallerHandlers, kube: MemoryBackend
) -> None:
    # generation 1 served on a cluster whose API is away; generation 2 serves elsewhere
    old, canary = _release(1, role=ReleaseRole.STABLE), _release(2)
    kube.held = {canary.release: canary}
    kube.silent = {old.release: old}
    ready = _event(
        EventType.RUN_READY,
        RunReady(revision=canary.revision, endpoint="http://router/workflows/x/invoke"),
        generation=2,
    )

    first = _delivery()
    await handlers.handle(ready, first)

    # promoted where it runs; the silent cluster's copy is left, and the event comes back
    assert kube.calls == ["install default-review-responder-g2 stable"]
    assert first.deferred_s == UNREADABLE_RETRY_S
    kube.answers_again()
    again = _delivery()
    await handlers.handle(ready, again)

    assert kube.calls[1:] == ["uninstall default-review-responder-g1"]
    assert kube.held == {canary.release: promoted(canary)}
    assert again.deferred_s is None


async def test_a_deletion_removes_what_answers_and_reports_the_run_removed_once_all_have(
    bus: Bus, handlers: InstallerHandlers, local: MemoryBackend, kube: MemoryBackend
) -> None:
    here, far = _release(2), _release(1, role=ReleaseRole.STABLE)
    local.held = {here.release: here}
    kube.silent = {far.release: far}
    deleted = _event(EventType.RUN_DELETED, RunDeleted(), generation=3)

    first = _delivery()
    await handlers.handle(deleted, first)
    await handlers.handle(deleted, _delivery())  # the same wait: said once

    assert (local.held, kube.calls) == ({}, [])
    assert first.deferred_s == UNREADABLE_RETRY_S
    # not removed while a cluster may hold a release; the status says why
    [(kind, data)] = await _published(bus)
    assert kind is EventType.BACKEND_AWAITED
    assert (data["backends"], data["removed"], data["deleting"]) == ([SILENT], [here.release], True)
    assert data["message"].startswith(
        f"waiting for the API of PlntBackend '{SILENT}' to answer, to remove the run's releases"
    )
    kube.answers_again()
    again = _delivery()
    await handlers.handle(deleted, again)

    assert kube.calls == [f"uninstall {far.release}"]
    assert again.deferred_s is None
    (_, _), (kind, data) = await _published(bus)
    # every release the deletion removed, the earlier deliveries' too
    assert kind is EventType.RUN_REMOVED
    assert sorted(data["releases_removed"]) == sorted([far.release, here.release])


async def test_compensation_removes_the_canary_it_sees_and_ends_once_a_silent_cluster_answers(
    bus: Bus, handlers: InstallerHandlers, local: MemoryBackend, kube: MemoryBackend
) -> None:
    # the canary failed on the local backend; the stable serves on a cluster gone silent
    stable, canary = _release(1, role=ReleaseRole.STABLE), _release(2)
    local.held = {canary.release: canary}
    kube.silent = {stable.release: stable}
    failed = _event(
        EventType.INSTALL_FAILED,
        InstallFailedEvent(
            reason=Reason.INSTALL_FAILED,
            message="not ready",
            revision=canary.revision,
            release=canary.release,
        ),
        generation=2,
    )

    first = _delivery()
    await handlers.handle(failed, first)

    # removed where it is; not ended while the stable (or another copy) may be out of sight
    assert (local.held, kube.calls) == ({}, [])
    assert first.deferred_s == UNREADABLE_RETRY_S
    [(kind, data)] = await _published(bus)
    assert kind is EventType.BACKEND_AWAITED
    assert (data["backends"], data["removed"], data["deleting"]) == (
        [SILENT],
        [canary.release],
        False,
    )
    assert "to remove the canary there" in data["message"]
    kube.answers_again()
    again = _delivery()
    await handlers.handle(failed, again)

    assert kube.held == {stable.release: stable}
    assert again.deferred_s is None
    (_, _), (kind, data) = await _published(bus)
    assert kind is EventType.RUN_ROLLED_BACK
    assert data["stable_revision"] == stable.revision


async def test_a_revert_retires_the_reverted_copy_it_sees_and_comes_back_for_a_silent_one(
    bus: Bus, handlers: InstallerHandlers, local: MemoryBackend, kube: MemoryBackend
) -> None:
    # generation 2 was promoted on two clusters, generation 1 kept; the far one goes silent
    kept, here = _release(1, role=ReleaseRole.PREVIOUS), _release(2, role=ReleaseRole.STABLE)
    far = here.model_copy(update={"release": f"{here.release}-far"})
    local.held = {kept.release: kept, here.release: here}
    kube.silent = {far.release: far}
    reverted = _event(
        EventType.RUN_REVERTED,
        RunReverted(
            revision=kept.revision,
            reverted_revision=here.revision,
            reason=Reason.ROLLBACK_REQUESTED,
        ),
        generation=2,
    )

    first = _delivery()
    await handlers.handle(reverted, first)

    # the kept release serves again and the reverted copy in sight goes at once
    assert local.calls == [f"install {kept.release} stable", f"uninstall {here.release}"]
    assert first.deferred_s == UNREADABLE_RETRY_S
    kube.answers_again()
    again = _delivery()
    await handlers.handle(reverted, again)

    assert kube.calls == [f"uninstall {far.release}"]
    assert kube.held == {}
    assert again.deferred_s is None


async def test_a_deletion_says_again_what_it_waits_for_when_one_of_two_silent_clusters_answers(
    bus: Bus, handlers: InstallerHandlers, local: MemoryBackend, kube: MemoryBackend
) -> None:
    near, far = _release(2), _release(1, role=ReleaseRole.STABLE)
    local.silent, local.silent_name = {near.release: near}, "gpu-near"
    kube.silent = {far.release: far}
    deleted = _event(EventType.RUN_DELETED, RunDeleted(), generation=3)

    await handlers.handle(deleted, _delivery())
    local.answers_again()
    await handlers.handle(deleted, _delivery())
    kube.answers_again()
    await handlers.handle(deleted, _delivery())

    published = await _published(bus)
    assert [(kind, data.get("backends"), data.get("removed")) for kind, data in published] == [
        (EventType.BACKEND_AWAITED, ["gpu-near", SILENT], []),
        (EventType.BACKEND_AWAITED, [SILENT], [near.release]),
        (EventType.RUN_REMOVED, None, None),
    ]
    assert sorted(published[-1][1]["releases_removed"]) == sorted([near.release, far.release])
