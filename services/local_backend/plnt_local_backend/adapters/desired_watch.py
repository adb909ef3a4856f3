"""Follows ``desired.>`` in ``plnt-releases`` and hands every change to a ``DesiredSink``.

A ``KvMirror`` (one reconnecting watch, complete state first) delivers the initial values
as one snapshot, so keys deleted while the local-backend was away are noticed. Records
that do not parse are reported as unreadable, never as deleted: a bad write must not tear
down a running release. It decides nothing about releases.
"""

from collections.abc import Mapping
from typing import Final, Protocol

from nats.aio.client import Client
from nats.js.kv import KeyValue
from pydantic import ValidationError

from plnt_common.bus.kv_mirror import KvMirror
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
        self._sink = sink
        self._mirror = KvMirror[DesiredRelease | object](
            nc=nc,
            bucket=RELEASES_BUCKET,
            keys=f"{DESIRED_PREFIX}.>",
            kv=kv,
            decode=_decode,
            replace_all=self._hand_over,
            apply=self._apply,
            log_as="desired",
            retry_s=retry_s,
            check_s=check_s,
        )

    async def run(self) -> None:
        """Watch for ever, rebuilding the watch whenever it fails or ends. Cancel to stop."""
        await self._mirror.run()

    async def _hand_over(self, loading: Mapping[str, DesiredRelease | object]) -> None:
        desired: dict[ReleaseKey, DesiredRelease] = {}
        unreadable: set[ReleaseKey] = set()
        for raw_key, value in loading.items():
            key = parse_desired_key(raw_key)
            if key is None:
                continue  # logged by _decode
            if isinstance(value, DesiredRelease):
                desired[key] = value
            else:
                unreadable.add(key)
        log.info("desired.loaded", releases=len(desired), unreadable=len(unreadable))
        await self._sink.replace_all(desired, unreadable=frozenset(unreadable))

    async def _apply(self, raw_key: str, value: DesiredRelease | object | None) -> None:
        key = parse_desired_key(raw_key)
        if key is None:  # only a deletion gets here: _decode skipped the key's writes
            log.error("desired.invalid_key", key=raw_key)
        elif value is None or isinstance(value, DesiredRelease):
            await self._sink.apply(key, value)


def _decode(update: KeyValue.Entry) -> DesiredRelease | object | None:
    """The desired release a record holds, ``_UNREADABLE`` when it does not parse, None
    (skipped) when its key names no release."""
    if parse_desired_key(update.key) is None:
        log.error("desired.invalid_key", key=update.key)
        return None
    try:
        return DesiredRelease.model_validate_json(update.value or b"")
    except ValidationError as exc:
        log.error("desired.unreadable", key=update.key, error=str(exc))
        return _UNREADABLE
