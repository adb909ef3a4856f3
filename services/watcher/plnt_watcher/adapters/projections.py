"""The ``plnt-runs`` bucket: fold events with compare-and-set, read, watch and delete."""

from collections.abc import AsyncIterator

from nats.js.errors import KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from plnt_common import tracing
from plnt_common.bus.kv_watch import Reconnects, watch_entries
from plnt_common.errors import Conflict
from plnt_common.events import Envelope
from plnt_common.projection import (
    OPENING_EVENTS,
    RunProjection,
    apply_event,
    empty_projection,
    run_key,
)

CAS_ATTEMPTS = 50


class ProjectionStore:
    def __init__(self, kv: KeyValue, *, reconnects: Reconnects | None = None) -> None:
        self._kv = kv
        self._reconnects = reconnects
        # What this replica last read or wrote per key (None: no projection): the next fold
        # tries it first and reads the bucket only when another replica wrote in between
        # (the update then conflicts). A new run's first fold follows the resource loop's
        # read that found none, so it creates the projection without reading again.
        self._known: dict[str, tuple[RunProjection | None, int]] = {}

    async def get(self, *, namespace: str, name: str) -> RunProjection | None:
        projection, _ = await self.read(namespace=namespace, name=name)
        return projection

    async def read(self, *, namespace: str, name: str) -> tuple[RunProjection | None, int]:
        """The stored projection and its revision, from one read (0: never written)."""
        return await self._get(run_key(namespace, name))

    async def _get(self, key: str) -> tuple[RunProjection | None, int]:
        read = await self._read_bucket(key)
        self._known[key] = read
        return read

    async def _read_bucket(self, key: str) -> tuple[RunProjection | None, int]:
        try:
            entry = await self._kv.get(key)
        except (KeyNotFoundError, KeyDeletedError):
            return None, 0
        if not entry.value:
            return None, entry.revision or 0
        return RunProjection.model_validate_json(entry.value), entry.revision or 0

    async def fold(self, event: Envelope) -> tuple[RunProjection | None, bool, int]:
        """Apply ``event``; returns the projection, whether it changed, and its revision.

        Folded in the span of ``event``'s handling, whose parent is the span the event was
        published in: an opening event's becomes the saga's ``status.traceId`` and
        ``saga_traceparent`` (none while tracing is off)."""
        key = run_key(event.namespace, event.name)
        traceparent = tracing.parent_traceparent() if event.event_type in OPENING_EVENTS else ""
        cached = self._known.get(key)
        if cached is not None and cached[0] is None and event.event_type not in OPENING_EVENTS:
            cached = None  # an event is dropped on the bucket's word, never on a cached read
        for attempt in range(CAS_ATTEMPTS):
            current: RunProjection | None
            if cached is not None and attempt == 0:
                current, revision = cached
            else:
                current, revision = await self._get(key)
            if current is None and event.event_type not in OPENING_EVENTS:
                return None, False, revision
            updated = apply_event(
                current or empty_projection(event.namespace, event.name),
                event,
                traceparent=traceparent,
            )
            if updated == current:
                return current, False, revision
            try:
                payload = updated.model_dump_json().encode()
                if revision:
                    written = await self._kv.update(key, payload, last=revision)
                else:
                    written = await self._kv.create(key, payload)
            except KeyWrongLastSequenceError:
                continue
            self._known[key] = (updated, written)
            return updated, True, written
        raise Conflict(f"projection {key} kept changing")

    async def revision(self, *, namespace: str, name: str) -> int:
        """The key's current revision (0 when absent), without decoding the projection."""
        try:
            entry = await self._kv.get(run_key(namespace, name))
        except (KeyNotFoundError, KeyDeletedError):
            return 0
        return entry.revision or 0 if entry.value else 0

    async def delete(self, *, namespace: str, name: str) -> None:
        self._known.pop(run_key(namespace, name), None)
        await self._kv.delete(run_key(namespace, name))

    async def watch_raw(self) -> AsyncIterator[tuple[str, bytes | None]]:
        """Every projection's stored bytes, then each change (None: deleted)."""
        async for entry in watch_entries(self._kv, reconnects=self._reconnects):
            if entry is None:
                continue
            if entry.operation in ("DEL", "PURGE") or not entry.value:
                yield entry.key, None
            else:
                yield entry.key, entry.value
