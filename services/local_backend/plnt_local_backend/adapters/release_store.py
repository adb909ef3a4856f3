"""The local-backend's side of ``plnt-releases`` and ``plnt-specs``: observed records and specs.

It writes only ``observed.<ns>.<release>`` keys (the installer owns ``desired.*``; the
watch on those lives in ``desired_watch``), and reads spec bytes by digest. NATS errors
are translated at this boundary: ``SpecNotFound`` when a spec is absent,
``BusUnavailable`` when the server does not answer.
"""

import nats.errors
from nats.aio.client import Client
from nats.js.errors import (
    KeyDeletedError,
    KeyNotFoundError,
    ObjectDeletedError,
    ObjectNotFoundError,
)
from nats.js.kv import KeyValue
from nats.js.object_store import ObjectStore
from pydantic import ValidationError

from plnt_common import subjects
from plnt_common.bus.kv_snapshot import kv_snapshot
from plnt_common.errors import BusUnavailable, SpecNotFound
from plnt_common.logs import get_logger
from plnt_common.releases import OBSERVED_PREFIX, ObservedRelease, observed_key
from plnt_common.subjects import SPECS_OBJECT_STORE
from plnt_local_backend.logic import ReleaseKey, parse_observed_key

log = get_logger(__name__)

"""Longest wait for the initial values of a listing watch."""

_TRANSIENT = (nats.errors.Error, TimeoutError, OSError)
"""What a call to NATS raises when the server is away; ``nats.errors.Error`` covers its own."""


class ReleaseStore:
    """Observed records in, specs out."""

    def __init__(self, *, nc: Client, releases: KeyValue, specs: ObjectStore) -> None:
        self._nc = nc
        self._kv = releases
        self._specs = specs

    async def fetch_spec(self, digest: str) -> bytes:
        """The spec bytes stored under ``digest``.

        Raises ``SpecNotFound`` when no such object exists, ``BusUnavailable`` otherwise.
        """
        try:
            result = await self._specs.get(digest)
        except (ObjectNotFoundError, ObjectDeletedError):
            raise SpecNotFound(
                f"spec {digest} is not in the object store {SPECS_OBJECT_STORE}"
            ) from None
        except _TRANSIENT as exc:
            raise BusUnavailable(f"fetching spec {digest} failed: {exc!r}") from None
        return bytes(result.data or b"")

    async def observed(self, key: ReleaseKey) -> ObservedRelease | None:
        """The observed record of ``key``; None when there is none or it is unreadable."""
        try:
            entry = await self._kv.get(observed_key(key.namespace, key.release))
        except (KeyNotFoundError, KeyDeletedError):
            return None
        except _TRANSIENT as exc:
            raise BusUnavailable(f"reading observed {key} failed: {exc!r}") from None
        try:
            return ObservedRelease.model_validate_json(entry.value or b"")
        except ValidationError as exc:
            log.warning("observed.unreadable", release=str(key), error=str(exc))
            return None

    async def observed_keys(self) -> dict[ReleaseKey, str]:
        """Every release with an observed record (including ones nobody desires any more),
        with the ``backend_name`` its record names ("" when unreadable or not kept)."""
        try:
            stored = await kv_snapshot(self._nc, subjects.RELEASES_BUCKET, f"{OBSERVED_PREFIX}.>")
        except _TRANSIENT as exc:
            raise BusUnavailable(f"listing observed releases failed: {exc!r}") from None
        found: dict[ReleaseKey, str] = {}
        for raw_key, (_, value) in stored.items():
            key = parse_observed_key(raw_key)
            if key is not None:
                found[key] = _backend_name(value)
        return found

    async def report(self, record: ObservedRelease) -> None:
        """Write ``record`` as the observed state of its release."""
        key = observed_key(record.namespace, record.release)
        try:
            await self._kv.put(key, record.model_dump_json().encode())
        except _TRANSIENT as exc:
            raise BusUnavailable(f"writing {key} failed: {exc!r}") from None

    async def forget(self, key: ReleaseKey) -> None:
        """Delete the observed record of ``key`` (a no-op when there is none)."""
        name = observed_key(key.namespace, key.release)
        try:
            await self._kv.delete(name)
        except _TRANSIENT as exc:
            raise BusUnavailable(f"deleting {name} failed: {exc!r}") from None


def _backend_name(raw: bytes) -> str:
    try:
        return ObservedRelease.model_validate_json(raw).backend_name
    except ValidationError:
        return ""
