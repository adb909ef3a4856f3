"""Mirrors the keys of a JetStream KV bucket into memory, live, through a reconnecting watch.

One long-lived watch (latest value per key, then every change). The complete current state
is collected first and handed over whole (``replace_all``), so keys deleted while the
mirror was away disappear and whoever reads the old state keeps reading it meanwhile;
after that each change goes over on its own (``apply``). The watch is rebuilt, state
first, when it cannot start (bucket not created yet, bus down), when it ends, and after
every NATS reconnect. The mirror decides nothing about the values: ``decode`` parses them
and may skip one (answer None) so a bad write never replaces a good value.
"""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, TypeVar

from nats.aio.client import Client
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from plnt_common.bus.kv_snapshot import InitialValues, kv_snapshot
from plnt_common.bus.kv_watch import IDLE, next_update
from plnt_common.logs import get_logger

log = get_logger(__name__)

V = TypeVar("V")


class KvMirror(Generic[V]):
    """Keeps a consumer equal to the ``keys`` of ``bucket`` until cancelled.

    ``kv`` is an open handle of the bucket; without one the mirror opens the bucket itself,
    waiting until it exists. ``retry_s`` is the pause after a failed watch; ``check_s``
    bounds how long a quiet watch goes without noticing a reconnect. Log events are named
    ``<log_as>.watch_failed``, ``.resync`` and ``.waiting_for_bucket``.
    """

    def __init__(
        self,
        *,
        nc: Client,
        bucket: str,
        decode: Callable[[KeyValue.Entry], V | None],
        replace_all: Callable[[Mapping[str, V]], Awaitable[None]],
        apply: Callable[[str, V | None], Awaitable[None]],
        log_as: str,
        keys: str = ">",
        kv: KeyValue | None = None,
        retry_s: float = 1.0,
        check_s: float = 1.0,
    ) -> None:
        self._nc = nc
        self._bucket = bucket
        self._decode = decode
        self._replace_all = replace_all
        self._apply = apply
        self._log_as = log_as
        self._keys = keys
        self._kv = kv
        self._retry_s = retry_s
        self._check_s = check_s

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
                    f"{self._log_as}.watch_failed",
                    bucket=self._bucket,
                    error=str(exc) or type(exc).__name__,
                    retry_s=self._retry_s,
                )
                failing = True
            await asyncio.sleep(self._retry_s)

    async def _watch_once(self) -> None:
        """One watch: load every current value, then apply changes until it must be rebuilt."""
        kv = self._kv or await self._open_bucket()
        reconnects = self._reconnects()
        watcher: Any = await kv.watch(self._keys)  # nats-py leaves KeyWatcher untyped
        try:
            # Handing over at nats-py's end-of-initial-values marker alone could hand over an
            # empty state (the marker can come first): count the keys a snapshot lists.
            initial = InitialValues(await kv_snapshot(self._nc, self._bucket, self._keys))
            # The initial values, handed over whole once complete; None afterwards, when
            # each change goes over at once.
            loading: dict[str, V] | None = {}
            while True:
                try:
                    update = await next_update(watcher, self._check_s)
                except StopAsyncIteration:
                    self._resync("watch ended")
                    return
                if self._reconnects() != reconnects:
                    # The ordered consumer would heal itself after missed heartbeats; a
                    # full reload right away is faster and also catches a recreated bucket.
                    self._resync("nats reconnected")
                    return
                if update is IDLE:
                    continue
                if update is None:
                    complete = initial.saw(None)
                else:
                    complete = initial.saw(update.key, update.revision or 0)
                    await self._take(update, loading)
                if loading is not None and complete:
                    await self._replace_all(loading)
                    loading = None
        finally:
            with contextlib.suppress(Exception):
                await watcher.stop()

    async def _take(self, update: KeyValue.Entry, loading: dict[str, V] | None) -> None:
        """One change into the state being loaded, or over to the consumer."""
        key: str = update.key
        value: V | None = None
        if update.operation not in (KV_DEL, KV_PURGE):
            value = self._decode(update)
            if value is None:
                return
        if loading is None:
            await self._apply(key, value)
        elif value is None:
            loading.pop(key, None)
        else:
            loading[key] = value

    def _resync(self, reason: str) -> None:
        log.info(f"{self._log_as}.resync", bucket=self._bucket, reason=reason)

    async def _open_bucket(self) -> KeyValue:
        """The bucket handle, waiting (without a warning per attempt) until it exists."""
        js = self._nc.jetstream()
        announced = False
        while True:
            try:
                return await js.key_value(self._bucket)
            except BucketNotFoundError:
                if not announced:
                    log.info(f"{self._log_as}.waiting_for_bucket", bucket=self._bucket)
                    announced = True
            await asyncio.sleep(self._retry_s)

    def _reconnects(self) -> int:
        return int(self._nc.stats.get("reconnects", 0))
