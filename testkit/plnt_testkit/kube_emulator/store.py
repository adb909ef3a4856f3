"""The emulator's object store: the API server's write and watch rules, without HTTP.

Kept from the real server, because clients depend on them:
- ``metadata.resourceVersion`` is one global counter, bumped by every write of any type;
  a no-op update writes nothing and keeps it;
- custom resources get ``metadata.generation`` 1 on create, bumped only when something
  other than metadata and status changes; ``uid`` and ``creationTimestamp`` are set once;
- with a status subresource, main-resource writes keep the stored status and status
  writes change nothing else;
- an update carrying a stale ``resourceVersion`` gets 409 Conflict (custom resources must
  carry one); a patch may carry one as a precondition;
- deleting an object with finalizers only sets ``deletionTimestamp``; it goes away when
  an update removes the last finalizer, and no finalizer may be added meanwhile;
- every write is a watch event kept in a bounded history (``watch_hub``); a watch from
  a version older than that history fails with 410 Expired.

Not kept: namespaces as objects, admission, schema validation (a type may get a
``validate`` callback), server-side apply, strategic merge for lists, pagination
(``limit`` is ignored, which servers may do), garbage collection by owner references.
The store is not thread-safe: the server calls it from its one event loop.
"""

import copy
import secrets
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

from plnt_testkit.kube_emulator.patches import PatchError, json_patch, merge_patch
from plnt_testkit.kube_emulator.types import STALE_OBJECT, ApiError, ResourceType
from plnt_testkit.kube_emulator.watch_hub import Match, Subscription, WatchEvent, WatchHub

Validator = Callable[[dict[str, Any]], None]
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
_SYSTEM_FIELDS = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "resourceVersion",
)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _drop_empty(meta: dict[str, Any]) -> None:
    """Empty lists and maps are absent, as Go's ``omitempty`` stores them."""
    for key in ("finalizers", "labels", "annotations", "ownerReferences"):
        if key in meta and not meta[key]:
            del meta[key]


def _spec_part(body: dict[str, Any]) -> dict[str, Any]:
    """Everything a generation covers: all but metadata and status."""
    return {k: v for k, v in body.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class ObjectStore:
    """Objects of the served types, the global resourceVersion and the watch history."""

    def __init__(
        self,
        *,
        types: tuple[ResourceType, ...],
        history_window: int,
        validators: dict[ResourceType, Validator] | None = None,
    ) -> None:
        self.types = types
        self._validators = validators or {}
        self._objects: dict[tuple[ResourceType, str, str], dict[str, Any]] = {}
        self._resource_version = 0
        self.watches = WatchHub(window=history_window)

    # --- reads -------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._resource_version

    def find_type(self, *, group: str, version: str, plural: str) -> ResourceType | None:
        for rtype in self.types:
            if (rtype.group, rtype.version, rtype.plural) == (group, version, plural):
                return rtype
        return None

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        return copy.deepcopy(self._current(rtype, namespace, name))

    def list_objects(
        self, rtype: ResourceType, namespace: str | None, match: Match
    ) -> tuple[list[dict[str, Any]], int]:
        """Matching objects sorted by namespace and name, and the version they are as of."""
        items = [
            copy.deepcopy(body)
            for (kind, ns, _), body in sorted(
                self._objects.items(), key=lambda kv: (kv[0][1], kv[0][2])
            )
            if kind == rtype and (not namespace or ns == namespace) and match(body)
        ]
        return items, self._resource_version

    def _current(self, rtype: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        body = self._objects.get((rtype, namespace or "", name))
        if body is None:
            raise ApiError.not_found(rtype, name)
        return body

    # --- writes ------------------------------------------------------------------------

    def create(
        self, rtype: ResourceType, namespace: str | None, body: dict[str, Any]
    ) -> dict[str, Any]:
        new = copy.deepcopy(body)
        self._check_type(rtype, new)
        meta = new.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
        name = meta.get("name")
        if not name:
            raise ApiError.invalid(
                rtype, "", "metadata.name: Required value: name or generateName is required"
            )
        if meta.get("resourceVersion"):
            raise ApiError(
                400, "BadRequest", "resourceVersion should not be set on objects to be created"
            )
        self._check_namespace(rtype, namespace, meta)
        key = (rtype, namespace or "", name)
        if key in self._objects:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{rtype.qualified} "{name}" already exists',
                details={"name": name, "group": rtype.group, "kind": rtype.plural},
            )
        for system_field in _SYSTEM_FIELDS:
            meta.pop(system_field, None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339())
        if rtype.custom:
            meta["generation"] = 1
        if rtype.status_subresource:
            new.pop("status", None)  # status is written through its subresource only
        self._validate(rtype, new)
        return self._write(rtype, key, new, previous=None)

    def update(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        body: dict[str, Any],
        *,
        subresource: Literal["status"] | None = None,
        precondition_checked: bool = False,
    ) -> dict[str, Any]:
        """PUT: the whole object (or its status); 409 when ``resourceVersion`` is stale."""
        current = self._current(rtype, namespace, name)
        self._check_type(rtype, body)
        meta = body.get("metadata") or {}
        if meta.get("name", name) != name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the URL")
        if not precondition_checked:
            self._check_version(rtype, current, meta.get("resourceVersion"), required=True)
        if subresource == "status":
            new = copy.deepcopy(current)
            if "status" in body:
                new["status"] = copy.deepcopy(body["status"])
            else:
                new.pop("status", None)
        else:
            new = copy.deepcopy(body)
            new_meta = new.setdefault("metadata", {})
            for system_field in (*_SYSTEM_FIELDS, "name", "namespace"):
                if system_field in current["metadata"]:
                    new_meta[system_field] = current["metadata"][system_field]
                else:
                    new_meta.pop(system_field, None)
            if rtype.status_subresource:  # the main resource cannot write status
                if "status" in current:
                    new["status"] = copy.deepcopy(current["status"])
                else:
                    new.pop("status", None)
            if rtype.custom and _spec_part(new) != _spec_part(current):
                new_meta["generation"] = int(current["metadata"].get("generation", 1)) + 1
            self._validate(rtype, new)
        new.setdefault("apiVersion", rtype.api_version)
        new.setdefault("kind", rtype.kind)
        return self._commit_update(rtype, current, new)

    def patch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        patch: Any,
        *,
        content_type: str,
        subresource: Literal["status"] | None = None,
    ) -> dict[str, Any]:
        """PATCH: apply to the stored object, then update; a patched ``resourceVersion``
        that differs from the stored one is a precondition and fails with 409."""
        current = self._current(rtype, namespace, name)
        media = content_type.split(";")[0].strip().lower()
        if media == STRATEGIC_MERGE_PATCH and rtype.custom:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {JSON_PATCH}, {MERGE_PATCH}",
            )
        try:
            if media in (MERGE_PATCH, STRATEGIC_MERGE_PATCH):
                if not isinstance(patch, dict):
                    raise PatchError("a merge patch is a JSON object")
                patched = merge_patch(current, patch)
            elif media == JSON_PATCH:
                patched = json_patch(current, patch)
            else:
                raise ApiError(
                    415, "UnsupportedMediaType", f"patch type {content_type!r} is not supported"
                )
        except PatchError as exc:
            raise ApiError.invalid(rtype, name, str(exc)) from None
        if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
            raise ApiError.invalid(rtype, name, "the patched object has no metadata")
        self._check_version(
            rtype, current, patched["metadata"].get("resourceVersion"), required=False
        )
        patched["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        return self.update(
            rtype, namespace, name, patched, subresource=subresource, precondition_checked=True
        )

    def delete(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        *,
        preconditions: dict[str, Any] | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """The object and whether it is gone now; with finalizers it is only marked."""
        current = self._current(rtype, namespace, name)
        meta = current["metadata"]
        for key in ("uid", "resourceVersion"):
            wanted = (preconditions or {}).get(key)
            if wanted and wanted != meta.get(key):
                raise ApiError.conflict(
                    rtype,
                    name,
                    f"Precondition failed: {key} in precondition: {wanted}, "
                    f"{key} in object meta: {meta.get(key)}",
                )
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return copy.deepcopy(current), False
            marked = copy.deepcopy(current)
            marked["metadata"].update(deletionTimestamp=now_rfc3339(), deletionGracePeriodSeconds=0)
            return self._write(rtype, self._key(rtype, current), marked, previous=current), False
        return self._remove(rtype, current), True

    # --- write internals ---------------------------------------------------------------

    def _commit_update(
        self, rtype: ResourceType, current: dict[str, Any], new: dict[str, Any]
    ) -> dict[str, Any]:
        old_meta, new_meta = current["metadata"], new["metadata"]
        if old_meta.get("deletionTimestamp"):
            added = set(new_meta.get("finalizers") or ()) - set(old_meta.get("finalizers") or ())
            if added:
                raise ApiError.invalid(
                    rtype,
                    old_meta["name"],
                    "metadata.finalizers: Forbidden: no new finalizers can be added if the "
                    "object is being deleted",
                )
        _drop_empty(new_meta)
        if new == current:  # a no-op write changes nothing, not even resourceVersion
            return copy.deepcopy(current)
        if new_meta.get("deletionTimestamp") and not new_meta.get("finalizers"):
            return self._remove(rtype, new, previous=current)
        return self._write(rtype, self._key(rtype, current), new, previous=current)

    def _write(
        self,
        rtype: ResourceType,
        key: tuple[ResourceType, str, str],
        body: dict[str, Any],
        *,
        previous: dict[str, Any] | None,
    ) -> dict[str, Any]:
        self._resource_version += 1
        _drop_empty(body["metadata"])
        body["metadata"]["resourceVersion"] = str(self._resource_version)
        self._objects[key] = body
        self.watches.record(
            version=self._resource_version,
            rtype=rtype,
            event_type="ADDED" if previous is None else "MODIFIED",
            body=body,
            previous=previous,
        )
        return copy.deepcopy(body)

    def _remove(
        self,
        rtype: ResourceType,
        body: dict[str, Any],
        *,
        previous: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        self._resource_version += 1
        gone = copy.deepcopy(body)
        # The DELETED event carries the version of the deletion, as etcd reports it.
        gone["metadata"]["resourceVersion"] = str(self._resource_version)
        del self._objects[self._key(rtype, body)]
        self.watches.record(
            version=self._resource_version,
            rtype=rtype,
            event_type="DELETED",
            body=gone,
            previous=previous or body,
        )
        return copy.deepcopy(gone)

    @staticmethod
    def _key(rtype: ResourceType, body: dict[str, Any]) -> tuple[ResourceType, str, str]:
        meta = body["metadata"]
        return rtype, meta.get("namespace") or "", meta["name"]

    def _check_type(self, rtype: ResourceType, body: dict[str, Any]) -> None:
        if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
            raise ApiError(400, "BadRequest", "the body must be an object with metadata")
        kind, api_version = body.get("kind"), body.get("apiVersion")
        if (kind and kind != rtype.kind) or (api_version and api_version != rtype.api_version):
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data ({api_version}) or kind ({kind}) does not match "
                f"the expected {rtype.api_version} {rtype.kind}",
            )
        body.setdefault("apiVersion", rtype.api_version)
        body.setdefault("kind", rtype.kind)

    @staticmethod
    def _check_namespace(rtype: ResourceType, namespace: str | None, meta: dict[str, Any]) -> None:
        if not rtype.namespaced:
            meta.pop("namespace", None)
            return
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on "
                "the request",
            )
        meta["namespace"] = namespace

    @staticmethod
    def _check_version(
        rtype: ResourceType, current: dict[str, Any], given: Any, *, required: bool
    ) -> None:
        name = current["metadata"]["name"]
        if not given:
            if required and rtype.custom:
                raise ApiError.invalid(
                    rtype,
                    name,
                    "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
                )
            return
        if str(given) != current["metadata"]["resourceVersion"]:
            raise ApiError.conflict(rtype, name, STALE_OBJECT)

    def _validate(self, rtype: ResourceType, body: dict[str, Any]) -> None:
        validator = self._validators.get(rtype)
        if validator is None:
            return
        try:
            validator(body)
        except ValueError as exc:
            raise ApiError.invalid(rtype, body["metadata"].get("name", ""), str(exc)) from None

    # --- watch -------------------------------------------------------------------------

    def subscribe(self, subscription: Subscription, *, since: int | None) -> list[WatchEvent]:
        """Register a watch; returns what it must send first.

        ``since`` None (or 0) starts with a synthetic ADDED per current object; a version
        starts after it, and one older than the retained history raises 410 Expired.
        """
        if since:
            backlog = self.watches.since(subscription, since)
        else:
            items, _ = self.list_objects(
                subscription.rtype, subscription.namespace, subscription.match
            )
            backlog = [
                WatchEvent(
                    int(item["metadata"]["resourceVersion"]),
                    subscription.rtype,
                    "ADDED",
                    item,
                    None,
                )
                for item in items
            ]
        self.watches.add(subscription)
        return backlog

    def compact(self) -> int:
        """Forget the watch history up to now; returns the oldest version still usable."""
        return self.watches.compact(up_to=self._resource_version)
