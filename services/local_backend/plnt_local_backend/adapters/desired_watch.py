"""Follows ``desired.>`` in ``plnt-releases`` and hands every change to a ``DesiredSink``.

One JetStream KV watch (latest value per key, then every change). The complete set of
initial values is delivered as one snapshot, so keys deleted while the local-backend was
away are noticed; the watch is rebuilt, snapshot first, when it fails, ends, or NATS
reconnects. Records that do not parse are reported as unreadable, never as deleted: a
bad write must not tear down a running release. It decides nothing about releases.
"""

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any, Final, Protocol

from nats.aio.client import Client
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue
from pydantic import ValidationError

from plnt_common.bus.kv_snapshot import InitialValues, kv_snapshot
from plnt_common.bus.kv_watch import IDLE, next_update
from plnt_common.logs import get_logger
from plnt_common.releases import DESIRED_PREFIX, DesiredRelease
from plnt_common.subjects import RELEASES_BUCKET
from plnt_local_backend.logic import ReleaseKey, parse_desired_key

log = get_logger(__name__)

_UNREADABLE: Final = object()


class DesiredSink(Protocol):
    """Receives desired state; the reconciler implements it."""

    async def replace_all(
        self, desired: Mapping[ReleaseKey, DesiredRelease], *, unreadable: frozenset[ReleaseKey]
    ) -> None:
        """Everything desired now; keys in ``unreadable`` exist but could not be parsed."""

    async def apply(self, key: ReleaseKey, desired: DesiredRelease | None) -> None:
        """One key changed; None means it was deleted."""


class DesiredWatch:
    """Keeps ``sink`` current with ``desired.>`` until cancelled; survives reconnects.

    ``retry_s`` is the pause after a failed watch; ``check_s`` bounds how long a quiet
    watch goes without noticing a reconnect.
    """

    def __init__(
        self,
        *,
        nc: Client,
        kv: KeyValue,
        sink: DesiredSink,
        retry_s: float = 1.0,
        check_s: float = 1.0,
    ) -> None:
        self._nc = nc
        self._kv = kv
        self._sink = sink
        self._retry_s = retry_s
        self._check_s = check_s

    async def run(self) -> None:
        """Watch for ever, rebuilding the watch whenever it fails or ends. Cancel to stop."""
        failing = False
        while True:
            try:
                await self._watch_once()
                failing = False
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Loud once per outage, quiet for its repeats.
                (log.debug if failing else log.warning)(
                    "desired.watch_failed", error=str(exc) or type(exc).__name__
                )
                failing = True
            await asyncio.sleep(self._retry_s)

    async def _watch_once(self) -> None:
        reconnects = self._reconnects()
        # nats-py leaves KeyWatcher untyped.
        watcher: Any = await self._kv.watch(f"{DESIRED_PREFIX}.>")
        try:
            # Handing over at nats-py's marker alone could hand over an empty state (it can
            # come first), and the reconciler would stop every runner.
            initial = InitialValues(
                await kv_snapshot(self._nc, RELEASES_BUCKET, f"{DESIRED_PREFIX}.>")
            )
            # The initial values, handed over whole once complete; None afterwards, when
            # each change goes to the sink at once.
            loading: dict[ReleaseKey, DesiredRelease | object] | None = {}
            while True:
                try:
                    update = await next_update(watcher, self._check_s)
                except StopAsyncIteration:
                    log.info("desired.resync", reason="watch ended")
                    return
                if self._reconnects() != reconnects:
                    # Changes may have been missed while disconnected: reload everything.
                    log.info("desired.resync", reason="nats reconnected")
                    return
                if update is IDLE:
                    continue
                if update is None:
                    complete = initial.saw(None)
                else:
                    complete = initial.saw(update.key, update.revision or 0)
                    await self._handle(update, loading=loading)
                if loading is not None and complete:
                    await self._hand_over(loading)
                    loading = None
        finally:
            with contextlib.suppress(Exception):
                await watcher.stop()

    async def _hand_over(self, loading: dict[ReleaseKey, DesiredRelease | object]) -> None:
        desired = {k: v for k, v in loading.items() if isinstance(v, DesiredRelease)}
        unreadable = frozenset(k for k, v in loading.items() if v is _UNREADABLE)
        log.info("desired.loaded", releases=len(desired), unreadable=len(unreadable))
        await self._sink.replace_all(desired, unreadable=unreadable)

    async def _handle(
        self, update: Any, *, loading: dict[ReleaseKey, DesiredRelease | object] | None
    ) -> None:
        key = parse_desired_key(update.key)
        if key is None:
            log.error("desired.invalid_key", key=update.key)
            return
        value: DesiredRelease | object | None
        if update.operation in (KV_DEL, KV_PURGE):
            value = None
        else:
            try:
                value = DesiredRelease.model_validate_json(update.value or b"")
            except ValidationError as exc:
                log.error("desired.unreadable", key=update.key, error=str(exc))
                value = _UNREADABLE
        if loading is not None:
            if value is None:
                loading.pop(key, None)
            else:
                loading[key] = value
        elif value is None or isinstance(value, DesiredRelease):
            await self._sink.apply(key, value)

    def _reconnects(self) -> int:
        return int(self._nc.stats.get("reconnects", 0))
