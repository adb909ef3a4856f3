"""The ``plnt-runs`` bucket: fold events with compare-and-set, read, watch and delete."""

from collections.abc import AsyncIterator

from nats.js.errors import KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from plnt_common.bus.kv_watch import Reconnects, watch_entries
from plnt_common.errors import Conflict
from plnt_common.events import Envelope
from plnt_common.projection import OPENING_EVENTS, RunProjection, apply_event, empty_projection

CAS_ATTEMPTS = 50


class ProjectionStore:
    def __init__(self, kv: KeyValue, *, reconnects: Reconnects | None = None) -> None:
        self._kv = kv
        self._reconnects = reconnects

    async def get(self, *, namespace: str, name: str) -> RunProjection | None:
        projection, _ = await self._get(f"{namespace}.{name}")
        return projection

    async def _get(self, key: str) -> tuple[RunProjection | None, int]:
        try:
            entry = await self._kv.get(key)
        except (KeyNotFoundError, KeyDeletedError):
            return None, 0
        if not entry.value:
            return None, entry.revision or 0
        return RunProjection.model_validate_json(entry.value), entry.revision or 0

    async def fold(self, event: Envelope) -> tuple[RunProjection | None, bool]:
        """Apply ``event``; returns the projection and whether it changed."""
        key = f"{event.namespace}.{event.name}"
        for _ in range(CAS_ATTEMPTS):
            current, revision = await self._get(key)
            if current is None and event.event_type not in OPENING_EVENTS:
                return None, False
            updated = apply_event(current or empty_projection(event.namespace, event.name), event)
            if updated == current:
                return current, False
            try:
                payload = updated.model_dump_json().encode()
                if revision:
                    await self._kv.update(key, payload, last=revision)
                else:
                    await self._kv.create(key, payload)
            except KeyWrongLastSequenceError:
                continue
            return updated, True
        raise Conflict(f"projection {key} kept changing")

    async def delete(self, *, namespace: str, name: str) -> None:
        await self._kv.delete(f"{namespace}.{name}")

    async def watch(self) -> AsyncIterator[tuple[str, RunProjection | None]]:
        """Every projection, then each change; the current ones again after a reconnection."""
        async for entry in watch_entries(self._kv, reconnects=self._reconnects):
            if entry is None:
                continue
            if entry.operation in ("DEL", "PURGE") or not entry.value:
                yield entry.key, None
            else:
                yield entry.key, RunProjection.model_validate_json(entry.value)
