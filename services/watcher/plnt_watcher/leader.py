"""Lease-based leader election: one watcher replica at a time turns resources into sagas.

The rules are client-go's ``leaderelection``: a replica takes the Lease when nobody holds
it, or when the holder's record has not changed for the lease duration *as this replica
observed it* (its own monotonic clock, so clock skew between nodes does not matter).
The leader renews every retry period and steps down when it could not renew for the
renew deadline, which is shorter than the lease duration: it stops before anyone else
may start. A replica that stops cleanly releases the Lease so a follower takes over at
its next try instead of waiting out the duration.

While leading, ``LeaderElector.run`` runs the given body (the resource loop) and cancels
it the moment leadership is lost. This module holds the timing and the decisions; the
Lease itself is read and written through a ``LeaseStore`` (``adapters/lease.py``).
"""

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from plnt_common.errors import PlntError
from plnt_common.logs import get_logger

log = get_logger(__name__)
Lead = Callable[[], Coroutine[Any, Any, None]]
"""What a leader runs: started on election, cancelled when the Lease is lost."""


@dataclass(frozen=True)
class LeaseRecord:
    """The Lease as read: holder, timing, and the resourceVersion it was read at."""

    holder: str
    duration_s: float
    acquired_at: datetime | None = None
    renewed_at: datetime | None = None
    transitions: int = 0
    version: str = ""
    """resourceVersion of the read; an update is conditional on it."""

    def same_claim(self, other: "LeaseRecord | None") -> bool:
        """Whether ``other`` shows the same claim (the version aside)."""
        return other is not None and replace(other, version="") == replace(self, version="")


class LeaseStore(Protocol):
    """Where the Lease lives. Methods raise ``Conflict`` when a concurrent writer won and
    another ``PlntError`` when the store cannot be reached."""

    async def get(self) -> LeaseRecord | None:
        """The Lease, or None when it does not exist."""

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        """Create it; ``Conflict`` when it exists already."""

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        """Replace it, conditional on ``record.version``."""


def may_take(current: LeaseRecord | None, *, identity: str, observed_at: float, now: float) -> bool:
    """Whether ``identity`` may write itself as holder of ``current`` at ``now``.

    ``observed_at`` is when this replica first saw ``current``'s claim, on its own clock.
    """
    if current is None or not current.holder or current.holder == identity:
        return True
    return now >= observed_at + current.duration_s


def claim(
    current: LeaseRecord | None, *, identity: str, duration_s: float, now: datetime
) -> LeaseRecord:
    """The record that makes ``identity`` the holder, renewed at ``now``."""
    if current is not None and current.holder == identity:
        return replace(current, duration_s=duration_s, renewed_at=now)
    return LeaseRecord(
        holder=identity,
        duration_s=duration_s,
        acquired_at=now,
        renewed_at=now,
        transitions=(current.transitions + 1) if current is not None else 0,
        version=current.version if current is not None else "",
    )


class LeaderElector:
    """Takes, renews and releases one Lease; ``run`` leads while it holds it."""

    def __init__(
        self,
        *,
        store: LeaseStore,
        identity: str,
        lease_duration_s: float,
        renew_deadline_s: float,
        retry_period_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not retry_period_s < renew_deadline_s < lease_duration_s:
            raise ValueError("lease timing must keep retry period < renew deadline < duration")
        self._store = store
        self.identity = identity
        self._duration_s = lease_duration_s
        self._renew_deadline_s = renew_deadline_s
        self._retry_s = retry_period_s
        self._clock = clock
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._holding: LeaseRecord | None = None
        self.leading = False

    async def run(self, stop: asyncio.Event, lead: Lead) -> None:
        """Until ``stop``: take the Lease, run ``lead()`` while holding it, cancel it
        when the Lease is lost; release the Lease on the way out."""
        try:
            while not stop.is_set():
                if await self._try_acquire_or_renew():
                    await self._lead(stop, lead)
                else:
                    await _sleep(stop, self._retry_s)
        finally:
            await self._release()

    async def _lead(self, stop: asyncio.Event, lead: Lead) -> None:
        self.leading = True
        log.info("leader.elected", identity=self.identity)
        task = asyncio.create_task(lead())
        renewed = self._clock()
        try:
            while not stop.is_set() and not task.done():
                await _sleep(stop, self._retry_s, task)
                if stop.is_set() or task.done():
                    break
                if await self._try_acquire_or_renew():
                    renewed = self._clock()
                    continue
                taken = self._observed is not None and self._observed.holder != self.identity
                if taken or self._clock() - renewed >= self._renew_deadline_s:
                    log.warning("leader.lost", identity=self.identity, taken_by_another=taken)
                    self._holding = None
                    break
        finally:
            self.leading = False
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception as exc:  # the body should not fail; say so, then elect again
                log.error("leader.body_failed", identity=self.identity, error=repr(exc))
            log.info("leader.stopped_leading", identity=self.identity)

    async def _try_acquire_or_renew(self) -> bool:
        """One attempt; True when this replica holds a freshly written Lease."""
        try:
            current = await self._store.get()
        except PlntError as exc:
            log.warning("leader.lease_unreadable", error=str(exc))
            return False
        now = self._clock()
        if current is None or not current.same_claim(self._observed):
            self._observed, self._observed_at = current, now
        if not may_take(current, identity=self.identity, observed_at=self._observed_at, now=now):
            return False
        wanted = claim(
            current, identity=self.identity, duration_s=self._duration_s, now=datetime.now(UTC)
        )
        try:
            if current is None:
                written = await self._store.create(wanted)
            else:
                written = await self._store.update(wanted)
        except PlntError as exc:  # another replica won the race, or the API is away
            log.info("leader.lease_not_written", error=str(exc))
            return False
        self._observed, self._observed_at, self._holding = written, self._clock(), written
        return True

    async def _release(self) -> None:
        """Give the Lease up (holder emptied) if this replica holds it; best effort."""
        holding, self._holding = self._holding, None
        if holding is None:
            return
        released = replace(holding, holder="", duration_s=1.0, renewed_at=datetime.now(UTC))
        try:
            await self._store.update(released)
            log.info("leader.released", identity=self.identity)
        except PlntError as exc:  # it expires on its own after the lease duration
            log.warning("leader.release_failed", error=str(exc))


async def _sleep(
    stop: asyncio.Event, seconds: float, task: "asyncio.Task[None] | None" = None
) -> None:
    """Sleep ``seconds``, waking early on ``stop`` (or when ``task`` ends)."""
    stopped = asyncio.ensure_future(stop.wait())
    waiters: set[asyncio.Future[Any]] = {stopped}
    if task is not None:
        waiters.add(task)
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
