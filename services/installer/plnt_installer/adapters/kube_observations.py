"""``observed-kube.<ns>.<release>`` records in ``plnt-releases``: the ``HelmObserver``'s store.

It writes and deletes what it is told and lists what is there; NATS errors become
``BusUnavailable``.
"""

import nats.errors
from nats.aio.client import Client
from nats.js.errors import KeyDeletedError, KeyNotFoundError
from nats.js.kv import KeyValue
from pydantic import ValidationError

from plnt_common import subjects
from plnt_common.bus.kv_snapshot import kv_snapshot
from plnt_common.errors import BusUnavailable
from plnt_common.releases import KUBE_OBSERVED_PREFIX, ObservedRelease, kube_observed_key

_TRANSIENT = (nats.errors.Error, TimeoutError, OSError)


class KubeObservations:
    """Implements ``helm_observer.ObservationStore`` over the ``plnt-releases`` bucket."""

    def __init__(self, *, nc: Client, kv: KeyValue) -> None:
        self._nc = nc
        self._kv = kv

    async def stored(self) -> dict[tuple[str, str], ObservedRelease | None]:
        """Every record by (namespace, release); an unreadable one maps to None."""
        try:
            stored = await kv_snapshot(
                self._nc, subjects.RELEASES_BUCKET, f"{KUBE_OBSERVED_PREFIX}.>"
            )
        except _TRANSIENT as exc:
            raise BusUnavailable(f"listing Kubernetes observations: {exc!r}") from None
        found: dict[tuple[str, str], ObservedRelease | None] = {}
        for key, (_, value) in stored.items():
            _, namespace, release = key.split(".", 2)
            try:
                found[(namespace, release)] = ObservedRelease.model_validate_json(value or b"")
            except ValidationError:
                found[(namespace, release)] = None  # rewritten or deleted by the next round
        return found

    async def put(self, record: ObservedRelease) -> None:
        key = kube_observed_key(record.namespace, record.release)
        try:
            await self._kv.put(key, record.model_dump_json().encode())
        except _TRANSIENT as exc:
            raise BusUnavailable(f"writing {key} failed: {exc!r}") from None

    async def delete(self, *, namespace: str, release: str) -> None:
        key = kube_observed_key(namespace, release)
        try:
            await self._kv.delete(key)
        except (KeyNotFoundError, KeyDeletedError):
            return
        except _TRANSIENT as exc:
            raise BusUnavailable(f"deleting {key} failed: {exc!r}") from None
