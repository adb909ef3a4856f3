"""The embedded mode's resource store: Kubernetes-like objects in the ``plnt-resources`` KV.

Semantics kept from the Kubernetes API, because the watcher treats both sources alike:
``generation`` starts at 1 and is bumped only when ``spec`` changes; ``resourceVersion`` is
the KV revision of the entry (so it changes on every write); ``status`` is written apart
from spec and never bumps generation; deleting an object with finalizers only sets
``deletionTimestamp``, and the object goes once the last finalizer is removed. Writes are
compare-and-set on the KV revision, so concurrent writers retry instead of losing updates.
"""

import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from nats.js.errors import (
    KeyDeletedError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
)

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.kv_snapshot import kv_snapshot
from plnt_common.bus.kv_watch import watch_entries
from plnt_common.errors import Conflict, ResourceNotFound
from plnt_common.names import DEFAULT_NAMESPACE
from plnt_common.resources import Resource

PLURALS = {"WorkflowRun": "workflowruns", "PlntBackend": "plntbackends"}
CLUSTER_SCOPE = "_"
CAS_ATTEMPTS = 20

ApplyOutcome = Literal["created", "configured", "unchanged"]


def object_key(kind: str, namespace: str | None, name: str) -> str:
    return f"{PLURALS[kind]}.{namespace or CLUSTER_SCOPE}.{name}"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class StoredObject:
    """An object as stored, with ``metadata.resourceVersion`` filled from the KV revision."""

    key: str
    revision: int
    body: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.body["kind"])

    @property
    def metadata(self) -> dict[str, Any]:
        return dict(self.body["metadata"])


def _decode(key: str, revision: int, raw: bytes) -> StoredObject:
    body = json.loads(raw)
    body["metadata"]["resourceVersion"] = str(revision)
    return StoredObject(key=key, revision=revision, body=body)


def _encode(body: dict[str, Any]) -> bytes:
    """The stored form: resourceVersion is the KV revision, so it is never stored."""
    metadata = {k: v for k, v in body["metadata"].items() if k != "resourceVersion"}
    return json.dumps({**body, "metadata": metadata}, separators=(",", ":")).encode()


class ResourceStore:
    """CRUD and watch over ``plnt-resources``; raises ``ResourceNotFound`` or ``Conflict``."""

    def __init__(self, bus: Bus) -> None:
        self._kv = bus.resources
        self._nc = bus.nc
        self._reconnects = bus.reconnects
        self._known: dict[str, tuple[int, bytes]] = {}

    async def get(self, kind: str, namespace: str | None, name: str) -> StoredObject | None:
        """The object, or None when it does not exist."""
        key = object_key(kind, namespace, name)
        stored = await self._read(key)
        return None if stored is None else _decode(key, *stored)

    async def list(self, kind: str, namespace: str | None = None) -> list[StoredObject]:
        """Every object of ``kind`` (in ``namespace`` when given), sorted by key."""
        keys = f"{PLURALS[kind]}.{namespace or '*'}.*"
        stored = await kv_snapshot(self._nc, subjects.RESOURCES_BUCKET, keys)
        return [_decode(key, revision, raw) for key, (revision, raw) in sorted(stored.items())]

    async def apply(self, resource: Resource) -> tuple[StoredObject, ApplyOutcome]:
        """Create or update spec, labels and annotations; generation bumps on spec change."""
        desired = resource.model_dump(mode="json", by_alias=True, exclude_none=True)
        desired.pop("status", None)
        namespace = (
            resource.metadata.namespace or DEFAULT_NAMESPACE
            if resource.kind == "WorkflowRun"
            else None
        )
        key = object_key(resource.kind, namespace, resource.metadata.name)
        for attempt in range(CAS_ATTEMPTS):
            # A key never written is tried first, without reading: a new object then costs
            # one write. Anything there (an object, or a deleted one's marker) fails it.
            first = attempt == 0
            current = (
                None if first else await self.get(resource.kind, namespace, resource.metadata.name)
            )
            if current is None:
                payload = _encode(self._new_body(desired, namespace))
                try:
                    if first:
                        revision = await self._kv.update(key, payload, last=0)
                    else:
                        revision = await self._kv.create(key, payload)
                except KeyWrongLastSequenceError:
                    continue
                return _decode(key, revision, payload), "created"
            if current.metadata.get("deletionTimestamp"):
                raise Conflict(
                    f"{resource.kind} {resource.metadata.name!r} is being deleted; "
                    "apply again once it is gone"
                )
            body, changed = self._updated_body(current.body, desired)
            if not changed:
                return current, "unchanged"
            try:
                revision = await self._kv.update(key, _encode(body), last=current.revision)
            except KeyWrongLastSequenceError:
                continue
            return _decode(key, revision, _encode(body)), "configured"
        raise Conflict(f"{key} kept changing while applying; try again")

    @staticmethod
    def _new_body(desired: dict[str, Any], namespace: str | None) -> dict[str, Any]:
        meta = {
            "name": desired["metadata"]["name"],
            "uid": str(uuid.uuid4()),
            "generation": 1,
            "creationTimestamp": _now(),
            "finalizers": [],
            "labels": desired["metadata"].get("labels", {}),
            "annotations": desired["metadata"].get("annotations", {}),
        }
        if namespace:
            meta["namespace"] = namespace
        return {**desired, "metadata": meta}

    @staticmethod
    def _updated_body(
        current: dict[str, Any], desired: dict[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        meta = dict(current["metadata"])
        spec_changed = current.get("spec") != desired.get("spec")
        labels = desired["metadata"].get("labels", {})
        annotations = desired["metadata"].get("annotations", {})
        changed = (
            spec_changed
            or meta.get("labels", {}) != labels
            or meta.get("annotations", {}) != annotations
        )
        meta.update(labels=labels, annotations=annotations)
        if spec_changed:
            meta["generation"] = int(meta.get("generation", 1)) + 1
        body = {**current, "spec": desired.get("spec"), "metadata": meta}
        return body, changed

    async def mutate(
        self,
        kind: str,
        namespace: str | None,
        name: str,
        change: Callable[[dict[str, Any]], dict[str, Any] | None],
        *,
        uid: str | None = None,
    ) -> StoredObject | None:
        """Apply ``change`` to the stored body with compare-and-set; retried on conflict.

        ``change`` returns the new body, or None to delete the object. Returns the stored
        object (None when deleted). Raises ``ResourceNotFound`` when it does not exist or
        its uid differs from ``uid`` (a newer object of the same name).
        """
        key = object_key(kind, namespace, name)
        # What this store wrote or watched last: tried first, so a writer that owns an object
        # (the watcher and its statuses) skips the read; the compare-and-set catches a stale
        # copy.
        known = self._known.pop(key, None)
        for _ in range(CAS_ATTEMPTS):
            cached, known = known, None
            stored = cached or await self._read(key)
            if stored is None:
                raise ResourceNotFound(
                    f"{kind} {namespace + '/' if namespace else ''}{name} not found"
                )
            revision, raw = stored
            current = _decode(key, revision, raw)
            if uid and current.metadata.get("uid") != uid:
                if cached:
                    continue  # the copy may predate a new object of the same name
                raise ResourceNotFound(
                    f"{kind} {namespace + '/' if namespace else ''}{name} not found"
                )
            body = change(json.loads(raw))  # a private copy to change
            try:
                if body is None:
                    await self._kv.delete(key, last=revision)
                    return None
                body["metadata"]["resourceVersion"] = current.metadata.get("resourceVersion")
                if body == current.body:
                    if cached:
                        continue  # "unchanged" is only trusted against the stored object
                    return current
                payload = _encode(body)
                revision = await self._kv.update(key, payload, last=revision)
            except KeyWrongLastSequenceError:
                continue
            self._known[key] = (revision, payload)
            return _decode(key, revision, payload)
        raise Conflict(f"{key} kept changing; gave up after {CAS_ATTEMPTS} attempts")

    async def _read(self, key: str) -> tuple[int, bytes] | None:
        """The stored (revision, bytes) of ``key``; None when absent."""
        try:
            entry = await self._kv.get(key)
        except (KeyNotFoundError, KeyDeletedError):
            return None
        if not entry.value:
            return None
        return entry.revision or 0, entry.value

    async def update_status(
        self,
        kind: str,
        namespace: str | None,
        name: str,
        status: dict[str, Any],
        *,
        uid: str | None = None,
    ) -> StoredObject | None:
        def with_status(body: dict[str, Any]) -> dict[str, Any]:
            body["status"] = status
            return body

        return await self.mutate(kind, namespace, name, with_status, uid=uid)

    async def add_finalizer(
        self,
        kind: str,
        namespace: str | None,
        name: str,
        finalizer: str,
        *,
        status_if_unset: dict[str, Any] | None = None,
    ) -> None:
        """Add ``finalizer`` (not to an object being deleted); with ``status_if_unset``,
        give an object without status that status in the same write."""

        def add(body: dict[str, Any]) -> dict[str, Any]:
            finalizers = body["metadata"].setdefault("finalizers", [])
            if finalizer not in finalizers and not body["metadata"].get("deletionTimestamp"):
                finalizers.append(finalizer)
            if status_if_unset is not None and not body.get("status"):
                body["status"] = status_if_unset
            return body

        await self.mutate(kind, namespace, name, add)

    async def remove_finalizer(
        self, kind: str, namespace: str | None, name: str, finalizer: str, *, uid: str | None = None
    ) -> None:
        """Drop ``finalizer``; an object marked for deletion with none left goes away."""

        def remove(body: dict[str, Any]) -> dict[str, Any] | None:
            meta = body["metadata"]
            meta["finalizers"] = [f for f in meta.get("finalizers", []) if f != finalizer]
            if meta.get("deletionTimestamp") and not meta["finalizers"]:
                return None
            return body

        await self.mutate(kind, namespace, name, remove, uid=uid)

    async def delete(
        self, kind: str, namespace: str | None, name: str
    ) -> Literal["deleted", "deleting"]:
        """Delete now, or mark for deletion while finalizers remain."""

        def mark(body: dict[str, Any]) -> dict[str, Any] | None:
            meta = body["metadata"]
            if not meta.get("finalizers"):
                return None
            meta.setdefault("deletionTimestamp", _now())
            return body

        remaining = await self.mutate(kind, namespace, name, mark)
        return "deleted" if remaining is None else "deleting"

    async def watch(self) -> AsyncIterator[tuple[str, StoredObject | None]]:
        """Every current object, then each change as it happens; None means deleted.

        After a reconnection the current objects are reported again.
        """
        async for entry in watch_entries(self._kv, reconnects=self._reconnects):
            if entry is None:  # end of the initial values
                continue
            if entry.operation in ("DEL", "PURGE") or not entry.value:
                self._known.pop(entry.key, None)
                yield entry.key, None
            else:
                revision = entry.revision or 0
                # a newer copy for ``mutate`` to write over, as if this store had read it
                if revision > self._known.get(entry.key, (0, b""))[0]:
                    self._known[entry.key] = (revision, entry.value)
                yield entry.key, _decode(entry.key, revision, entry.value)

    async def watch_object(
        self, kind: str, namespace: str | None, name: str
    ) -> AsyncIterator[StoredObject | None]:
        """The object now (None if absent), then each change; None once it is deleted.

        "Now" is read with a get, not told by the watch: nats-py marks the end of a watch's
        initial values when the server has nothing pending and the client has received
        nothing yet, which also holds while a large value is still on its way (a 600 KB
        object was reported absent about once in 25 watches).
        """
        key = object_key(kind, namespace, name)
        watcher = await self._kv.watch(key)  # first, so no change after the get is missed
        try:
            stored = await self._read(key)
            seen = stored[0] if stored else 0
            current = None if stored is None else _decode(key, *stored)
            yield current
            async for entry in watcher:
                if entry is None or (entry.revision or 0) <= seen:
                    continue  # the end-of-initial-values marker, or what the get returned
                seen = entry.revision or 0
                if entry.operation in ("DEL", "PURGE") or not entry.value:
                    if current is None:
                        continue  # absence already reported
                    current = None
                else:
                    current = _decode(key, seen, entry.value)
                yield current
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]
