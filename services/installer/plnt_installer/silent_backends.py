"""Waiting for PlntBackends whose API is silent: the event comes back until they answer,
and a rollback or a deletion says in the run's status what it waits for."""

from plnt_common.bus.bus import Bus, content_step
from plnt_common.bus.consumer import Delivery
from plnt_common.bus.saga_events import last_of_saga
from plnt_common.events import BackendAwaited, Envelope, EventType, follow_up
from plnt_common.logs import get_logger

log = get_logger(__name__)
SERVICE = "installer"
UNREADABLE_RETRY_S = 15.0
"""How soon a promotion, a revert, a compensation or a removal comes back for the
releases of PlntBackends whose API was silent."""


def come_back_for(
    silent: tuple[str, ...], delivery: Delivery, event: str, **fields: object
) -> None:
    """Have the event delivered again for what the ``silent`` PlntBackends hold, within
    ``UNREADABLE_RETRY_S`` (sooner than a later check it was deferred to already)."""
    retry_s = min(delivery.deferred_s or UNREADABLE_RETRY_S, UNREADABLE_RETRY_S)
    delivery.defer(retry_s)
    log.warning(event, backends=list(silent), retry_s=retry_s, **fields)


async def wait_to_end(
    bus: Bus,
    event: Envelope,
    delivery: Delivery,
    silent: tuple[str, ...],
    removed: list[str],
    *,
    deleting: bool,
) -> None:
    """A rollback or a deletion that cannot end while ``silent`` PlntBackends are unheard:
    ``backend.awaited`` (when what it waits for, or has removed, changed since the last
    one), then the event comes back."""
    before = await last_of_saga(bus, EventType.BACKEND_AWAITED, event)
    earlier: BackendAwaited | None = before.payload() if before is not None else None
    so_far = tuple(sorted({*(earlier.removed if earlier else ()), *removed}))
    awaited = BackendAwaited(
        backends=silent, removed=so_far, deleting=deleting, message=_waiting(silent, deleting)
    )
    # the stream drops the same content (its id names it) for two hours, this check after
    if awaited != earlier:
        step = content_step(*silent, "", *so_far)
        await bus.publish(
            follow_up(event, EventType.BACKEND_AWAITED, awaited, source=SERVICE), step=step
        )
    logged = "run.removal_waits" if deleting else "canary.removal_waits"
    come_back_for(silent, delivery, logged, removed=list(so_far))


async def removed_while_waiting(bus: Bus, event: Envelope) -> tuple[str, ...]:
    """The releases earlier deliveries of a deletion removed while it waited."""
    before = await last_of_saga(bus, EventType.BACKEND_AWAITED, event)
    return before.payload().removed if before is not None else ()


def _waiting(silent: tuple[str, ...], deleting: bool) -> str:
    names = ", ".join(repr(name) for name in silent)
    which = "PlntBackend" if len(silent) == 1 else "PlntBackends"
    what = "the run's releases" if deleting else "the canary"
    return (
        f"waiting for the API of {which} {names} to answer, to remove {what} there "
        "(removed where the backends answered); deleting the PlntBackend ends the wait"
    )
