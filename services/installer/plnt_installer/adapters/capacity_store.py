"""The ``plnt-capacity`` bucket: one observation per PlntBackend, and its reservations.

``<backend>`` holds the latest ``BackendCapacity``; ``reservations.<backend>`` the
placements it does not count yet, changed only by compare-and-set on the entry's
revision so two installer replicas never book the same GPUs.
"""

import nats.errors
from nats.js.errors import KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue
from pydantic import ValidationError

from plnt_common.capacity import BackendCapacity, Reservation, Reservations, reservations_key
from plnt_common.errors import BusUnavailable
from plnt_common.logs import get_logger

log = get_logger(__name__)
_TRANSIENT = (nats.errors.Error, TimeoutError, OSError)


class CapacityStore:
    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    async def get(self, backend: str) -> BackendCapacity | None:
        """The latest observation; None when none is stored (or it is unreadable)."""
        raw, _ = await self._read(backend)
        if raw is None:
            return None
        try:
            return BackendCapacity.model_validate_json(raw)
        except ValidationError as exc:
            log.error("capacity.unreadable", backend=backend, error=str(exc))
            return None

    async def put(self, capacity: BackendCapacity) -> None:
        value = capacity.model_dump_json(by_alias=True).encode()
        try:
            await self._kv.put(capacity.backend, value)
        except _TRANSIENT as exc:
            raise BusUnavailable(f"writing capacity of {capacity.backend!r}: {exc!r}") from None

    async def reservations(self, backend: str) -> tuple[tuple[Reservation, ...], int]:
        """The backend's reservations and the entry's revision (0: no entry yet)."""
        raw, revision = await self._read(reservations_key(backend))
        if raw is None:
            return (), revision
        try:
            return Reservations.model_validate_json(raw).items, revision
        except ValidationError as exc:  # rewritten whole by the next booking
            log.error("capacity.reservations_unreadable", backend=backend, error=str(exc))
            return (), revision

    async def swap(self, backend: str, items: tuple[Reservation, ...], *, revision: int) -> bool:
        """Store ``items`` if the entry is still at ``revision``; False when another
        writer changed it first (read again and decide again)."""
        key = reservations_key(backend)
        value = Reservations(items=items).model_dump_json(by_alias=True).encode()
        try:
            if revision == 0:
                await self._kv.create(key, value)
            else:
                await self._kv.update(key, value, last=revision)
        except KeyWrongLastSequenceError:
            return False
        except _TRANSIENT as exc:
            raise BusUnavailable(f"writing reservations of {backend!r}: {exc!r}") from None
        return True

    async def _read(self, key: str) -> tuple[bytes | None, int]:
        try:
            entry = await self._kv.get(key)
        except KeyDeletedError as exc:
            return None, exc.entry.revision if exc.entry and exc.entry.revision else 0
        except KeyNotFoundError:
            return None, 0
        except _TRANSIENT as exc:
            raise BusUnavailable(f"reading {key!r} of the capacity bucket: {exc!r}") from None
        return entry.value, entry.revision or 0
