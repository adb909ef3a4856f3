"""Reverting a promoted revision to the kept previous one: `plnt rollback` and the guard.

A revert runs as a new attempt of the Ready saga's generation (``sagaid`` attempt + 1):
it is recorded as the run's latest saga first (so the guard, the installer's keep window
and any late step see the Ready saga replaced), then the route moves back in one write
(stable = the previous revision, all traffic), then ``run.reverted`` ends the new saga.
The Ready saga stays ended; every saga still ends exactly once. A redelivery finds the
new attempt recorded and redoes the idempotent rest.
"""

import asyncio
from datetime import UTC, datetime

from nats.js.errors import KeyDeletedError, KeyNotFoundError

from plnt_common.bus.bus import Bus
from plnt_common.bus.saga import advance_latest_saga, latest_saga
from plnt_common.bus.saga_events import last_of_saga
from plnt_common.events import (
    CanaryInstalled,
    Envelope,
    EventType,
    OperatorRequest,
    RunReady,
    RunReverted,
    new_event,
    saga_id,
)
from plnt_common.logs import get_logger
from plnt_common.projection import saga_order
from plnt_common.releases import (
    ObservedRelease,
    ReleasePhase,
    kube_observed_key,
    observed_key,
    release_of_revision,
)
from plnt_common.routes import RouteEntry, RouteTarget
from plnt_common.status import Reason
from plnt_promoter.adapters.route_table import RouteTable

log = get_logger(__name__)
SERVICE = "promoter"


async def rollback(bus: Bus, routes: RouteTable, event: Envelope) -> None:
    """``rollback.requested``: an operator's revert (`plnt rollback`, plnt.work/rollback)."""
    request: OperatorRequest = event.payload()
    by = f" by {request.by}" if request.by else ""
    await revert(
        bus, routes, event, reason=Reason.ROLLBACK_REQUESTED, message=f"rollback requested{by}"
    )


def revert_saga_id(ready_saga: str, namespace: str, name: str) -> str:
    generation, attempt = saga_order(ready_saga)
    return saga_id(namespace, name, generation, attempt + 1)


async def revert(
    bus: Bus, routes: RouteTable, cause: Envelope, *, reason: Reason, message: str
) -> bool:
    """Move ``cause``'s Ready saga's run back to its kept previous revision.

    ``cause``: an event of the Ready saga (``rollback.requested``, or the ``run.ready`` the
    guard holds). False, with the reason logged, when there is nothing to revert to.
    """
    namespace, name = cause.namespace, cause.name
    new_saga = revert_saga_id(cause.sagaid, namespace, name)
    # the reads at once: a rollback's latency is what it is for
    latest, claim = await asyncio.gather(
        latest_saga(bus, namespace, name), bus.terminal_claim(cause.sagaid)
    )
    if claim is None or claim.event is None or claim.event.event_type is not EventType.RUN_READY:
        log.info("revert.refused", reason="the saga did not end Ready")
        return False
    ready: RunReady = claim.event.payload()
    kept_release = release_of_revision(namespace, name, ready.previous_revision)
    refused, kept = await asyncio.gather(
        _not_kept(bus, claim.event, ready), observed(bus, namespace, kept_release)
    )
    if refused and latest[0] != new_saga:  # (else a redelivery: decided already)
        log.info("revert.refused", reason=refused)
        return False
    if kept is None or kept.phase is not ReleasePhase.READY or not kept.url:
        log.info("revert.refused", reason=f"the kept {ready.previous_revision} is not serving")
        return False
    if await advance_latest_saga(bus, namespace, name, new_saga, read=latest) != new_saga:
        log.info("revert.refused", reason="a newer saga replaced the Ready one")
        return False
    previous = RouteTarget(
        revision=kept.revision, url=kept.url, saga_id=kept.saga_id, release=kept.release
    )

    def back(current: RouteEntry | None) -> RouteEntry | None:
        if current is None or current.stable is None:
            return None
        if current.stable.revision not in (ready.revision, previous.revision):
            return None  # something else serves: leave it
        return current.model_copy(update={"stable": previous, "canary": None, "canary_weight": 0})

    await routes.update(namespace=namespace, name=name, change=back)
    reverted = RunReverted(
        revision=previous.revision,
        reverted_revision=ready.revision,
        reason=reason,
        message=message,
    )
    event = new_event(
        EventType.RUN_REVERTED,
        reverted,
        namespace=namespace,
        name=name,
        sagaid=new_saga,
        generation=cause.generation,
        source=SERVICE,
        causation=cause,
    )
    await bus.publish_terminal(event)
    log.info("run.reverted", revision=previous.revision, reverted=ready.revision, reason=reason)
    return True


async def _not_kept(bus: Bus, ready_event: Envelope, ready: RunReady) -> str:
    """Why the previous revision is not kept any more ("" when it is)."""
    if not ready.previous_revision:
        return "no previous revision: the run's first rollout"
    installed = await last_of_saga(bus, EventType.CANARY_INSTALLED, ready_event)
    data: CanaryInstalled | None = installed.payload() if installed else None
    keep_s = data.run.spec.rollback.keep_previous_s if data else 0.0
    if keep_s <= 0:
        return "nothing kept: spec.rollback.keepPreviousFor is not set"
    elapsed = (datetime.now(UTC) - ready_event.time).total_seconds()
    if elapsed >= keep_s:
        return f"nothing kept: keepPreviousFor {keep_s:g}s ended {elapsed - keep_s:.1f}s ago"
    return ""


async def observed(bus: Bus, namespace: str, release: str) -> ObservedRelease | None:
    """What the local backend, or the installer for Helm, observes of ``release``."""
    for key in (observed_key(namespace, release), kube_observed_key(namespace, release)):
        try:
            entry = await bus.releases.get(key)
        except (KeyNotFoundError, KeyDeletedError):
            continue
        if entry.value:
            return ObservedRelease.model_validate_json(entry.value)
    return None
