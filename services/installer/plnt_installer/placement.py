"""Capacity observation and GPU reservations: observe -> decide (``capacity``) -> book.

The installer holds the backend clients, so it observes: ``CapacityObserver`` writes every
PlntBackend's ``BackendCapacity`` to ``plnt-capacity`` every ``interval_s`` (5 s: the view
is never more than 10 s old while the installer runs), and ``Placements.current`` observes
at once when the stored one is older than ``MAX_AGE_S``. A placement books its pods' GPUs
with compare-and-set on the backend's reservations entry, holds them until its runner is
up (``mark_up``: the next observation counts the pod instead) or its install failed
(``release``).
"""

import asyncio
import contextlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

from plnt_common.capacity import (
    RESERVATION_GRACE_S,
    BackendCapacity,
    Reservation,
    class_capacity,
)
from plnt_common.errors import BusUnavailable, KubernetesUnavailable, PlntError
from plnt_common.logs import get_logger
from plnt_common.releases import DesiredRelease
from plnt_common.resources import PlntBackendSpec
from plnt_installer import capacity
from plnt_installer.capacity import Refusal

log = get_logger(__name__)

INTERVAL_S = 5.0
MAX_AGE_S = 10.0
"""An observation older than this is made again before a placement is decided on it."""
CAS_ATTEMPTS = 20


class CapacitySource(Protocol):
    async def free_nodes(self, *, name: str, spec: PlntBackendSpec) -> dict[str, dict[str, int]]:
        """GPU class -> node -> free GPUs. Raises a ``PlntError`` when unreadable."""
        ...


class CapacityBook(Protocol):
    """``adapters.capacity_store.CapacityStore``."""

    async def get(self, backend: str) -> BackendCapacity | None: ...

    async def put(self, capacity: BackendCapacity) -> None: ...

    async def reservations(self, backend: str) -> tuple[tuple[Reservation, ...], int]: ...

    async def swap(
        self, backend: str, items: tuple[Reservation, ...], *, revision: int
    ) -> bool: ...


class Catalog(Protocol):
    async def all(self) -> dict[str, PlntBackendSpec]: ...


def _now() -> datetime:
    return datetime.now(UTC)


class Placements:
    def __init__(
        self,
        *,
        sources: dict[str, CapacitySource],
        book: CapacityBook,
        max_age_s: float = MAX_AGE_S,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self._sources = sources
        self._book = book
        self._max_age_s = max_age_s
        self._clock = clock

    async def observe(self, name: str, spec: PlntBackendSpec) -> BackendCapacity | None:
        """Observe ``name`` now and store it; None for a type no source counts."""
        source = self._sources.get(spec.type)
        if source is None:
            return None
        now = self._clock()
        nodes = await source.free_nodes(name=name, spec=spec)
        observed = BackendCapacity(
            backend=name,
            type=spec.type,
            observed_at=now,
            classes=tuple(
                class_capacity(
                    name=class_name, gpu_class=spec.gpu_classes[class_name], nodes=free, now=now
                )
                for class_name, free in sorted(nodes.items())
            ),
        )
        await self._book.put(observed)
        return observed

    async def current(self, name: str, spec: PlntBackendSpec) -> BackendCapacity | None:
        stored = await self._book.get(name)
        if stored is not None:
            age = (self._clock() - stored.observed_at).total_seconds()
            if 0 <= age <= self._max_age_s:
                return stored
        return await self.observe(name, spec)

    async def reserve(
        self, *, backend_name: str, spec: PlntBackendSpec, canary: DesiredRelease
    ) -> Refusal | None:
        """Book the canary's GPUs; the ``Refusal`` when no node fits it now, or the
        backend's API does not answer (``unreachable``). None also when nothing is counted
        (no GPUs asked for, a class without a count, a backend whose nodes it may not
        read: logged, installed unbooked).

        Raises ``BusUnavailable`` (retryable) when the bucket does not answer or other
        placements kept winning the compare-and-set.
        """
        if not canary.gpu_class or canary.gpu_count == 0:
            return None
        try:
            observed = await self.current(backend_name, spec)
        except KubernetesUnavailable as exc:
            log.warning("capacity.backend_unreachable", backend=backend_name, error=str(exc))
            return Refusal(
                needed=canary.gpu_count,
                largest_free=0,
                message=f"its API did not answer ({exc})",
                unreachable=True,
            )
        except PlntError as exc:
            # unknown is not "full": the cluster's scheduler still refuses a pod with no
            # room, and the install's readiness reports it (Unschedulable)
            log.warning(
                "capacity.unknown_installing_unbooked", backend=backend_name, error=str(exc)
            )
            return None
        counted = observed.of(canary.gpu_class) if observed is not None else None
        if observed is None or counted is None:
            return None
        hold_s = spec.ready_timeout_s + RESERVATION_GRACE_S
        for _ in range(CAS_ATTEMPTS):
            held, revision = await self._book.reservations(backend_name)
            now = self._clock()
            decided = capacity.place(
                canary=canary, capacity=counted, reservations=held, now=now, hold_s=hold_s
            )
            if isinstance(decided, Refusal):
                return decided
            items = capacity.after_booking(
                held,
                decided,
                release=capacity.release_key(canary),
                observed_at=observed.observed_at,
                now=now,
                hold_s=hold_s,
            )
            if await self._book.swap(backend_name, items, revision=revision):
                log.info(
                    "capacity.reserved",
                    backend=backend_name,
                    release=canary.release,
                    nodes=[r.node for r in decided],
                )
                return None
        raise BusUnavailable(f"reserving GPUs on {backend_name!r}: too many concurrent bookings")

    async def mark_up(self, *, backend_name: str, canary: DesiredRelease) -> None:
        """The runner is up: from the next observation on its pod counts instead."""
        key = capacity.release_key(canary)
        now = self._clock()
        await self._rewrite(
            backend_name, lambda held: capacity.marked_up(held, release=key, now=now)
        )

    async def release(self, *, backend_name: str, canary: DesiredRelease) -> None:
        """The install failed: its GPUs are free again at once."""
        key = capacity.release_key(canary)
        await self._rewrite(backend_name, lambda held: capacity.without(held, release=key))

    async def _rewrite(
        self,
        backend_name: str,
        change: Callable[[tuple[Reservation, ...]], tuple[Reservation, ...]],
    ) -> None:
        for _ in range(CAS_ATTEMPTS):
            held, revision = await self._book.reservations(backend_name)
            changed = change(held)
            if changed == held or await self._book.swap(backend_name, changed, revision=revision):
                return
        raise BusUnavailable(f"updating reservations on {backend_name!r}: too many writers")


class StatusWriter(Protocol):
    """``adapters.backend_status.KubeBackendStatus``: the PlntBackend's status.capacity."""

    async def write(self, capacity: BackendCapacity) -> None: ...


STATUS_REFRESH_S = 30.0
"""A status whose figures did not change is rewritten this often (its observedAt moves):
the bus view is the fresh one, the object is not written every round."""


def _figures(capacity: BackendCapacity) -> tuple[tuple[str, int, int], ...]:
    return tuple((c.gpu_class, c.free, c.largest_free_on_one_node) for c in capacity.classes)


class CapacityObserver:
    """Observes every PlntBackend every ``interval_s`` into ``plnt-capacity``, and into
    its ``status.capacity`` when given a ``status`` writer (PlntBackends on Kubernetes)."""

    def __init__(
        self,
        *,
        catalog: Catalog,
        placements: Placements,
        interval_s: float = INTERVAL_S,
        status: StatusWriter | None = None,
    ) -> None:
        self._catalog = catalog
        self._placements = placements
        self._interval_s = interval_s
        self._status = status
        self._written: dict[str, BackendCapacity] = {}

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.observe_once()
            except Exception as exc:  # the next round tries again
                log.warning("capacity.round_failed", error=repr(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self._interval_s)

    async def observe_once(self) -> None:
        for name, spec in sorted((await self._catalog.all()).items()):
            try:
                observed = await self._placements.observe(name, spec)
                if observed is not None:
                    await self._write_status(observed)
            except PlntError as exc:
                log.warning("capacity.backend_unreadable", backend=name, error=str(exc))

    async def _write_status(self, observed: BackendCapacity) -> None:
        if self._status is None:
            return
        last = self._written.get(observed.backend)
        if last is not None and _figures(last) == _figures(observed):
            recent = (observed.observed_at - last.observed_at).total_seconds() < STATUS_REFRESH_S
            if recent:
                return
        await self._status.write(observed)
        self._written[observed.backend] = observed
