"""Mirrors the ``plnt-routes`` KV bucket into the router's in-memory ``RouteTable``, live.

One long-lived JetStream watch (latest value per key, then every change) feeds the table;
requests never touch NATS. The watch is (re)built when it cannot start (bucket not created
yet, bus down), when it ends, and after every NATS reconnect; each rebuild loads the
complete current state before swapping it in, so keys deleted while the router was away
disappear and the old table keeps serving meanwhile. It does not write routes (the
promoter does) and does not decide anything about them.
"""

import asyncio
import contextlib
from typing import Any

from nats.aio.client import Client
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue
from pydantic import ValidationError

from plnt_common.bus.kv_snapshot import InitialValues, kv_snapshot
from plnt_common.bus.kv_watch import IDLE, next_update
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
        self._nc = nc
        self._table = table
        self._bucket = bucket
        self._retry_s = retry_s
        self._check_s = check_s
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
        failing = False
        while True:
            try:
                await self._watch_once()
                # A watch that ended on purpose (reconnect, stop) is rebuilt at once.
                failing = False
                continue
            except Exception as exc:
                # Log the first failure of a streak loudly, the repeats quietly: a bus outage
                # would otherwise print one warning per retry for its whole duration.
                (log.debug if failing else log.warning)(
                    "routes.watch_failed",
                    bucket=self._bucket,
                    error=str(exc) or type(exc).__name__,
                    retry_s=self._retry_s,
                )
                failing = True
            await asyncio.sleep(self._retry_s)

    async def _watch_once(self) -> None:
        """One watch: load every current route, then apply changes until it must be rebuilt."""
        kv = await self._open_bucket()
        reconnects = self._reconnects()
        watcher = await kv.watchall()
        try:
            # Swapping in at nats-py's marker alone could swap in an empty table (it can
            # come first): every workflow would answer 404 until the routes arrived.
            initial = InitialValues(await kv_snapshot(self._nc, self._bucket))
            # Routes of the initial load, swapped in whole once complete; None once that
            # has happened and updates go straight to the table.
            loading: dict[str, RouteEntry] | None = {}
            while True:
                try:
                    update = await next_update(watcher, self._check_s)
                except StopAsyncIteration:
                    log.info("routes.resync", bucket=self._bucket, reason="watch ended")
                    return
                if self._reconnects() != reconnects:
                    # The ordered consumer would heal itself after missed heartbeats; a
                    # full reload right away is faster and also catches a recreated bucket.
                    log.info("routes.resync", bucket=self._bucket, reason="nats reconnected")
                    return
                if update is IDLE:
                    continue
                if update is None:
                    complete = initial.saw(None)
                else:
                    complete = initial.saw(update.key, update.revision or 0)
                    self._apply(update, loading=loading)
                if loading is not None and complete:
                    self._table.replace_all(loading)
                    loading = None
                    log.info("routes.loaded", bucket=self._bucket, routes=len(self._table))
        finally:
            with contextlib.suppress(Exception):
                await watcher.stop()

    def _apply(self, update: KeyValue.Entry, *, loading: dict[str, RouteEntry] | None) -> None:
        """Apply one KV change to the snapshot being loaded, or to the live table."""
        key: str = update.key
        if update.operation in (KV_DEL, KV_PURGE):
            if loading is not None:
                loading.pop(key, None)
            else:
                self._table.delete(key=key)
                log.info("routes.deleted", key=key)
            return
        try:
            entry = RouteEntry.model_validate_json(update.value or b"")
        except ValidationError as exc:
            # Keep serving the previous entry: a bad write must not take a workflow down.
            log.error("routes.invalid_entry", key=key, revision=update.revision, error=str(exc))
            return
        if loading is not None:
            loading[key] = entry
        else:
            self._table.put(key=key, entry=entry)
            log.info(
                "routes.updated",
                key=key,
                stable=entry.stable.revision if entry.stable else None,
                canary=entry.canary.revision if entry.canary else None,
                canary_weight=entry.canary_weight,
            )

    async def _open_bucket(self) -> Any:
        """The bucket handle, waiting (without a warning per attempt) until it exists."""
        js = self._nc.jetstream()
        announced = False
        while True:
            try:
                return await js.key_value(self._bucket)
            except BucketNotFoundError:
                if not announced:
                    log.info("routes.waiting_for_bucket", bucket=self._bucket)
                    announced = True
            await asyncio.sleep(self._retry_s)

    def _reconnects(self) -> int:
        return int(self._nc.stats.get("reconnects", 0))
