"""The ``plnt-routes`` bucket as a feed of entries, for the live ``Serving`` condition.

A KV watch (current values first, started again after a reconnect); a deleted or
unreadable entry comes as None. It decides nothing and writes nothing.
"""

from collections.abc import AsyncIterator

from nats.js.kv import KV_DEL, KV_PURGE, KeyValue
from pydantic import ValidationError

from plnt_common.bus.kv_watch import Reconnects, watch_entries
from plnt_common.logs import get_logger
from plnt_common.routes import RouteEntry

log = get_logger(__name__)


async def route_entries(
    kv: KeyValue, *, reconnects: Reconnects | None = None
) -> AsyncIterator[tuple[str, RouteEntry | None]]:
    """``(key, entry)`` for every route entry, then for every change."""
    async for entry in watch_entries(kv, reconnects=reconnects):
        if entry is None:
            continue  # the end of the current values
        if entry.operation in (KV_DEL, KV_PURGE) or not entry.value:
            yield entry.key, None
            continue
        try:
            yield entry.key, RouteEntry.model_validate_json(entry.value)
        except ValidationError as exc:
            log.error("serving.unreadable_route", key=entry.key, error=str(exc))
            yield entry.key, None
