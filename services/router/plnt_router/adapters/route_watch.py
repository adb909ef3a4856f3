"""Mirrors the ``plnt-routes`` KV bucket into the router's in-memory ``RouteTable``, live.

A ``KvMirror`` (one reconnecting watch, complete state first) feeds the table; requests
never touch NATS and read only the table. Keys deleted while the router was away
disappear on the next full load, and the old table keeps serving meanwhile. It does not
write routes (the promoter does) and does not decide anything about them.
"""

import asyncio
import contextlib
from collections.abc import Mapping

from nats.aio.client import Client
from nats.js.kv import KeyValue
from pydantic import ValidationError

from plnt_common.bus.kv_mirror import KvMirror
from plnt_common.logs import get_logger
from plnt_common.routes import RouteEntry
from plnt_common.subjects import ROUTES_BUCKET
from plnt_router.table import RouteTable

log = get_logger(__name__)


class RouteWatcher:
    """Keeps ``table`` equal to the routes bucket until stopped; survives reconnects.

    ``retry_s`` is the pause between attempts when the bucket is missing or the bus is
    down; ``check_s`` bounds how long a quiet watch goes without noticing a reconnect.
    """

    def __init__(
        self,
        *,
        nc: Client,
        table: RouteTable,
        bucket: str = ROUTES_BUCKET,
        retry_s: float = 1.0,
        check_s: float = 1.0,
    ) -> None:
        self._table = table
        self._bucket = bucket
        self._mirror = KvMirror(
            nc=nc,
            bucket=bucket,
            decode=_decode,
            replace_all=self._replace_all,
            apply=self._apply,
            log_as="routes",
            retry_s=retry_s,
            check_s=check_s,
        )
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Run the watch in a background task; returns at once (see ``table.loaded``)."""
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name="plnt-router-route-watch")

    async def stop(self) -> None:
        """Cancel the background watch and wait for it to unsubscribe."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def run(self) -> None:
        """Watch for ever, rebuilding the watch whenever it fails or ends. Cancel to stop."""
        await self._mirror.run()

    async def _replace_all(self, routes: Mapping[str, RouteEntry]) -> None:
        self._table.replace_all(routes)
        log.info("routes.loaded", bucket=self._bucket, routes=len(self._table))

    async def _apply(self, key: str, entry: RouteEntry | None) -> None:
        if entry is None:
            self._table.delete(key=key)
            log.info("routes.deleted", key=key)
            return
        self._table.put(key=key, entry=entry)
        log.info(
            "routes.updated",
            key=key,
            stable=entry.stable.revision if entry.stable else None,
            canary=entry.canary.revision if entry.canary else None,
            canary_weight=entry.canary_weight,
        )


def _decode(update: KeyValue.Entry) -> RouteEntry | None:
    """The route a KV value holds; None for one that does not parse, so the previous
    entry keeps serving: a bad write must not take a workflow down."""
    try:
        return RouteEntry.model_validate_json(update.value or b"")
    except ValidationError as exc:
        log.error("routes.invalid_entry", key=update.key, revision=update.revision, error=str(exc))
        return None
