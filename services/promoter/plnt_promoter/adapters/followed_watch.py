"""Live feeds the route follower reads: observed releases and route entries.

Each feed is a KV watch (``watch_entries``: current values first, started again after a
reconnect) turned into plain records; a deletion comes as None. They decide nothing.
"""

from collections.abc import AsyncIterator
from typing import Any, TypeVar

from nats.js.errors import KeyDeletedError, KeyNotFoundError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue
from pydantic import ValidationError

from plnt_common.bus.kv_watch import Reconnects, watch_entries
from plnt_common.logs import get_logger
from plnt_common.releases import KUBE_OBSERVED_PREFIX, OBSERVED_PREFIX, ObservedRelease
from plnt_common.routes import RouteEntry

log = get_logger(__name__)

OBSERVED_PREFIXES = frozenset({OBSERVED_PREFIX, KUBE_OBSERVED_PREFIX})

_Record = TypeVar("_Record", ObservedRelease, RouteEntry)


async def observed_changes(
    kv: KeyValue, *, reconnects: Reconnects | None = None
) -> AsyncIterator[tuple[str, ObservedRelease | None, int]]:
    """``(key, record, revision)`` for every observed record, local or Kubernetes."""
    async for entry in watch_entries(kv, reconnects=reconnects):
        if entry is not None and observed_parts(entry.key) is not None:
            yield entry.key, _parsed(entry, ObservedRelease), entry.revision or 0


async def observed_now(kv: KeyValue, key: str) -> tuple[ObservedRelease | None, int]:
    """The observed record under ``key`` as the bucket holds it now, and its revision."""
    try:
        entry = await kv.get(key)
    except (KeyNotFoundError, KeyDeletedError):
        return None, 0
    return _parsed(entry, ObservedRelease), entry.revision or 0


def observed_parts(key: str) -> tuple[str, str] | None:
    """``(namespace, release)`` of an observed record's key; None for any other key."""
    parts = key.split(".")
    if len(parts) != 3 or parts[0] not in OBSERVED_PREFIXES:
        return None  # desired records
    return parts[1], parts[2]


async def route_changes(
    kv: KeyValue, *, reconnects: Reconnects | None = None
) -> AsyncIterator[tuple[str, RouteEntry | None, int]]:
    """``(key, entry, revision)`` for every route entry; a deleted one comes as None."""
    async for entry in watch_entries(kv, reconnects=reconnects):
        if entry is not None:
            yield entry.key, _parsed(entry, RouteEntry), entry.revision or 0


def _parsed(entry: Any, model: type[_Record]) -> _Record | None:
    if entry.operation in (KV_DEL, KV_PURGE) or not entry.value:
        return None
    try:
        return model.model_validate_json(entry.value)
    except ValidationError as exc:
        log.error("follow.unreadable_record", key=entry.key, error=str(exc))
        return None
