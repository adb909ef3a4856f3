"""The saga registry in ``plnt-sagas``: which saga of a run is the latest, and which ended.

Two kinds of keys: ``<sagaid>`` (create-only terminal claims, see ``Bus.publish_terminal``)
and ``latest.<ns>.<name>`` (the newest saga the watcher started for a run). The watcher
advances ``latest`` *before* it publishes a saga's first event, so any service that sees
an event can tell at once, without waiting for the projection, whether a newer saga (a
newer generation, or the deletion) has replaced it. The record outlives the run's
deletion, so a straggler of a deleted run is never taken for current.
"""

import asyncio
import functools

from nats.js.errors import KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError

from plnt_common.bus.bus import Bus
from plnt_common.errors import Conflict
from plnt_common.events import Envelope, EventType
from plnt_common.projection import saga_order
from plnt_common.saga import SagaState, classify

CAS_ATTEMPTS = 20


def latest_key(namespace: str, name: str) -> str:
    return f"latest.{namespace}.{name}"


async def latest_saga(bus: Bus, namespace: str, name: str) -> tuple[str, int]:
    """The latest saga id of a run and the record's revision; ("", 0) when none."""
    try:
        entry = await bus.sagas.get(latest_key(namespace, name))
    except (KeyNotFoundError, KeyDeletedError):
        return "", 0
    assert entry.revision is not None  # a stored entry always has one
    return (entry.value or b"").decode(), entry.revision


async def advance_latest_saga(
    bus: Bus, namespace: str, name: str, sagaid: str, *, read: tuple[str, int] | None = None
) -> str:
    """Record ``sagaid`` as the run's latest saga unless a newer one is recorded.

    A run deleted and created again starts at generation 1; its first saga replaces a
    latest saga that ended with ``run.removed``. ``read``: the record as the caller just
    read it (``latest_saga``), tried before reading again. Returns the latest saga id
    after the call.
    """
    key = latest_key(namespace, name)
    read_latest = functools.partial(latest_saga, bus, namespace, name)
    current, revision = read or await read_latest()
    for _ in range(CAS_ATTEMPTS):
        if current == sagaid:
            return current
        if (
            current
            # not mutated: `>=` is equivalent (equal order is the same saga, returned above)
            and saga_order(current) > saga_order(sagaid)  # pragma: no mutate
            and not await _removed(bus, current)
        ):
            return current  # a slower replica's view: keep the newer saga
        try:
            if revision:
                await bus.sagas.update(key, sagaid.encode(), last=revision)
            else:
                await bus.sagas.create(key, sagaid.encode())
        except KeyWrongLastSequenceError:
            current, revision = await read_latest()
            continue
        return sagaid
    raise Conflict(f"{key} kept changing")


async def _removed(bus: Bus, sagaid: str) -> bool:
    claim = await bus.terminal_claim(sagaid)
    return claim is not None and claim.event_type == EventType.RUN_REMOVED.value


async def observe_saga(bus: Bus, event: Envelope) -> SagaState:
    """The saga's state as ``event``'s handler must act on it.

    When this very event caused the saga's terminal claim, an earlier delivery of it
    claimed and may have stopped before publishing: the claimed event is published now
    (unless its publication is recorded), so a crash in between cannot leave a saga
    without its end.
    """
    # both reads at once: one round trip of latency on every saga step
    (latest, _), claim = await asyncio.gather(
        latest_saga(bus, event.namespace, event.name), bus.terminal_claim(event.sagaid)
    )
    if claim is not None and claim.event is not None and claim.event.causationid == event.id:
        await bus.publish_claimed(claim.event)
    return classify(event, latest, claim is not None)
