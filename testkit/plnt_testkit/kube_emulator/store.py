"""The emulator's object store: the API server's write and watch rules, without HTTP.

Kept from the real server, because clients depend on them:
- ``metadata.resourceVersion`` is one global counter, bumped by every write of any type;
  a no-op update writes nothing and keeps it;
- custom resources (and CRDs) get ``metadata.generation`` 1 on create, bumped only when
  something other than metadata and status changes; ``uid`` and ``creationTimestamp`` are
  set once; ``managedFields`` record every write's field manager (``managed_fields``);
- custom resources come from CRDs: creating an ``apiextensions.k8s.io/v1`` CRD serves its
  versions (``crds``) and admits their objects through its schema (``schema``: pruning,
  defaults, validation, CEL, ``fieldValidation``, warnings); deleting it deletes its
  objects (waiting for their finalizers) and then stops serving them;
- with a status subresource, main-resource writes keep the stored status and status
  writes change nothing else;
- an update carrying a stale ``resourceVersion`` gets 409 Conflict (custom resources must
  carry one); a patch may carry one as a precondition;
- deleting an object with finalizers only sets ``deletionTimestamp``; it goes away when
  an update removes the last finalizer, and no finalizer may be added meanwhile;
- namespaces are objects (phase ``Active``, the ``kubernetes.io/metadata.name`` label);
- every write is a watch event kept in a bounded history (``watch_hub``); a watch from
  a version older than that history fails with 410 Expired.

Not kept: namespace existence for namespaced objects and namespace termination (deleting
a namespace removes it at once and leaves its objects), admission of built-in types (no
schemas: any field is kept), server-side apply, strategic merge for lists, pagination
(``limit`` is ignored, which servers may do), garbage collection by owner references.
The store is not thread-safe: the server calls it from its one event loop.
"""

import copy
import secrets
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from plnt_testkit.kube_emulator import crds, managed_fields
from plnt_testkit.kube_emulator.patches import PatchError, json_patch, merge_patch
from plnt_testkit.kube_emulator.schema import CrdSchema, FieldValidation
from plnt_testkit.kube_emulator.types import (
    ALWAYS_SERVED,
    CUSTOM_RESOURCE_DEFINITIONS,
    NAMESPACES,
    PODS,
    STALE_OBJECT,
    ApiError,
    ResourceType,
)
from plnt_testkit.kube_emulator.watch_hub import Match, Subscription, WatchEvent, WatchHub

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


@dataclass
class Write:
    """Who writes and how strictly: what a request's query and headers say."""

    manager: str = "plnt-emulator"
    """The field manager (``fieldManager``, else from the User-Agent)."""
    field_validation: FieldValidation = "Warn"
    """The API server's default when a request sends no ``fieldValidation``."""
    warnings: list[str] = field(default_factory=list)
    """Filled by the write: what goes back in ``Warning`` headers."""


def _without_managed_fields(body: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in body["metadata"].items() if k != "managedFields"}
    return {**body, "metadata": meta}


def _spec_part(body: dict[str, Any]) -> dict[str, Any]:
    """Everything a generation covers: all but metadata and status."""
    return {k: v for k, v in body.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class ObjectStore:
    """Objects of the served types, the global resourceVersion and the watch history."""

    def __init__(self, *, types: tuple[ResourceType, ...], history_window: int) -> None:
        self._builtin = tuple(t for t in types if t not in ALWAYS_SERVED) + ALWAYS_SERVED
        self._served: dict[str, list[crds.ServedVersion]] = {}
        """CRD name -> what it serves."""
        self._objects: dict[tuple[ResourceType, str, str], dict[str, Any]] = {}
        self._resource_version = 0
        self.watches = WatchHub(window=history_window)

    @property
    def types(self) -> tuple[ResourceType, ...]:
        """Every served type: the built-ins, then each CRD's served versions."""
        return self._builtin + tuple(v.rtype for vs in self._served.values() for v in vs)

    @types.setter
    def types(self, builtin: tuple[ResourceType, ...]) -> None:
        """Serve these built-in types from now on (CRDs keep serving theirs)."""
        self._builtin = tuple(builtin)

    def served_crds(self) -> dict[str, list[crds.ServedVersion]]:
        return dict(self._served)

    # --- reads -------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._resource_version

    def find_type(self, *, group: str, version: str, plural: str) -> ResourceType | None:
        for rtype in self.types:
            if (rtype.group, rtype.version, rtype.plural) == (group, version, plural):
                return rtype
        return None

    def schema_of(self, rtype: ResourceType) -> CrdSchema | None:
        """The schema objects of ``rtype`` are admitted by; None for built-in types."""
        for versions in self._served.values():
            for version in versions:
                if version.rtype == rtype:
                    return version.schema
        return None

    def _crd_of(self, rtype: ResourceType) -> str | None:
        for name, versions in self._served.items():
            if any(v.rtype == rtype for v in versions):
                return name
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
        self,
        rtype: ResourceType,
        namespace: str | None,
        body: dict[str, Any],
        *,
        write: Write | None = None,
    ) -> dict[str, Any]:
        write = write or Write()
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
        crd = self._crd_of(rtype)
        if crd and self._objects[(CUSTOM_RESOURCE_DEFINITIONS, "", crd)]["metadata"].get(
            "deletionTimestamp"
        ):
            raise ApiError(
                405,
                "MethodNotAllowed",
                f'create not allowed while custom resource definition "{crd}" is terminating',
            )
        for system_field in (*_SYSTEM_FIELDS, "managedFields"):
            meta.pop(system_field, None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339())
        if rtype.keeps_generation:
            meta["generation"] = 1
        if rtype.status_subresource and not rtype.status_on_create:
            new.pop("status", None)  # status is written through its subresource only
        if rtype == PODS:
            # what the pod strategy starts a pod at (a type served without the status
            # subresource keeps the status it was created with)
            new.setdefault("status", {"phase": "Pending"})
        new = self._admit(rtype, new, old=None, write=write, subresource=None)
        if rtype == CUSTOM_RESOURCE_DEFINITIONS:
            crds.check_crd(new)
        elif rtype == NAMESPACES:
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = name
            new["spec"] = {"finalizers": ["kubernetes"]}
            new["status"] = {"phase": "Active"}
        self._manage(rtype, None, new, write, subresource=None)
        if rtype == CUSTOM_RESOURCE_DEFINITIONS:
            new["status"] = crds.established_status(new, now=meta["creationTimestamp"])
        created = self._write(rtype, key, new, previous=None)
        if rtype == CUSTOM_RESOURCE_DEFINITIONS:
            self._serve(created)
        return created

    def update(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        body: dict[str, Any],
        *,
        subresource: Literal["status"] | None = None,
        precondition_checked: bool = False,
        write: Write | None = None,
    ) -> dict[str, Any]:
        """PUT: the whole object (or its status); 409 when ``resourceVersion`` is stale."""
        write = write or Write()
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
            new = self._admit(rtype, new, old=current, write=write, subresource="status")
        else:
            new = copy.deepcopy(body)
            new_meta = new.setdefault("metadata", {})
            for system_field in (*_SYSTEM_FIELDS, "name", "namespace", "managedFields"):
                if system_field in current["metadata"]:
                    new_meta[system_field] = current["metadata"][system_field]
                else:
                    new_meta.pop(system_field, None)
            if rtype.status_subresource:  # the main resource cannot write status
                if "status" in current:
                    new["status"] = copy.deepcopy(current["status"])
                else:
                    new.pop("status", None)
            new = self._admit(rtype, new, old=current, write=write, subresource=None)
            if rtype.keeps_generation and _spec_part(new) != _spec_part(current):
                new["metadata"]["generation"] = int(current["metadata"].get("generation", 1)) + 1
            if rtype == CUSTOM_RESOURCE_DEFINITIONS:
                crds.check_crd(new)
        new.setdefault("apiVersion", rtype.api_version)
        new.setdefault("kind", rtype.kind)
        updated = self._commit_update(rtype, current, new, write=write, subresource=subresource)
        if rtype == CUSTOM_RESOURCE_DEFINITIONS and subresource is None:
            self._serve(updated)
        return updated

    def patch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        patch: Any,
        *,
        content_type: str,
        subresource: Literal["status"] | None = None,
        write: Write | None = None,
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
            rtype,
            namespace,
            name,
            patched,
            subresource=subresource,
            precondition_checked=True,
            write=write,
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
        if rtype == CUSTOM_RESOURCE_DEFINITIONS and name in self._served:
            return self._delete_crd(current)
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return copy.deepcopy(current), False
            marked = copy.deepcopy(current)
            marked["metadata"].update(deletionTimestamp=now_rfc3339(), deletionGracePeriodSeconds=0)
            return self._write(rtype, self._key(rtype, current), marked, previous=current), False
        return self._remove(rtype, current), True

    # --- CRDs ----------------------------------------------------------------------------

    def _serve(self, crd: dict[str, Any]) -> None:
        """Serve what ``crd`` declares now, in place of what it declared before."""
        name = crd["metadata"]["name"]
        versions = crds.served_versions(crd)
        for other, served in self._served.items():
            taken = {v.rtype for v in served} & {v.rtype for v in versions}
            if other != name and taken:
                raise ApiError.conflict(
                    CUSTOM_RESOURCE_DEFINITIONS, name, f"{other} already serves these names"
                )
        self._served[name] = versions

    def _instances(self, crd: str) -> list[tuple[ResourceType, str, str]]:
        kinds = {v.rtype for v in self._served.get(crd, [])}
        return [key for key in self._objects if key[0] in kinds]

    def _delete_crd(self, current: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Delete every object of the CRD, then the CRD once the last is gone.

        Meanwhile the CRD carries the cleanup finalizer and refuses new objects."""
        name = current["metadata"]["name"]
        if not self._instances(name):
            self._withdraw(name)
            return self._remove(CUSTOM_RESOURCE_DEFINITIONS, current), True
        marked = copy.deepcopy(current)
        if not marked["metadata"].get("deletionTimestamp"):
            marked["metadata"].update(deletionTimestamp=now_rfc3339(), deletionGracePeriodSeconds=0)
            finalizers = marked["metadata"].setdefault("finalizers", [])
            if crds.CLEANUP_FINALIZER not in finalizers:
                finalizers.append(crds.CLEANUP_FINALIZER)
            current = self._write(
                CUSTOM_RESOURCE_DEFINITIONS,
                self._key(CUSTOM_RESOURCE_DEFINITIONS, current),
                marked,
                previous=current,
            )
        for rtype, namespace, instance in self._instances(name):
            self.delete(rtype, namespace or None, instance)
        # the last object's removal removed the CRD too, unless finalizers hold some
        return copy.deepcopy(current), name not in self._served

    def _finish_crd(self, name: str) -> tuple[dict[str, Any], bool] | None:
        """Remove a terminating CRD whose objects are all gone; None while some remain."""
        crd = self._objects.get((CUSTOM_RESOURCE_DEFINITIONS, "", name))
        if crd is None or not crd["metadata"].get("deletionTimestamp") or self._instances(name):
            return None
        self._withdraw(name)
        return self._remove(CUSTOM_RESOURCE_DEFINITIONS, crd), True

    def _withdraw(self, name: str) -> None:
        """Stop serving a CRD's types; their open watches end."""
        self.watches.close_types({v.rtype for v in self._served.pop(name)})

    # --- write internals ---------------------------------------------------------------

    def _admit(
        self,
        rtype: ResourceType,
        body: dict[str, Any],
        *,
        old: dict[str, Any] | None,
        write: Write,
        subresource: Literal["status"] | None,
    ) -> dict[str, Any]:
        schema = self.schema_of(rtype)
        if schema is None:
            return body
        admitted, warnings = schema.admit(
            body, old=old, field_validation=write.field_validation, subresource=subresource
        )
        write.warnings.extend(warnings)
        return admitted

    def _manage(
        self,
        rtype: ResourceType,
        current: dict[str, Any] | None,
        new: dict[str, Any],
        write: Write,
        *,
        subresource: Literal["status"] | None,
    ) -> None:
        entries = (current or {}).get("metadata", {}).get("managedFields") or []
        new["metadata"]["managedFields"] = managed_fields.record(
            copy.deepcopy(entries),
            before=current,
            after=new,
            manager=write.manager,
            api_version=rtype.api_version,
            subresource=subresource,
            now=now_rfc3339(),
        )
        if not new["metadata"]["managedFields"]:
            del new["metadata"]["managedFields"]

    def _commit_update(
        self,
        rtype: ResourceType,
        current: dict[str, Any],
        new: dict[str, Any],
        *,
        write: Write | None = None,
        subresource: Literal["status"] | None = None,
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
        if _without_managed_fields(new) == _without_managed_fields(current):
            return copy.deepcopy(current)  # a no-op write changes nothing, not even its version
        self._manage(rtype, current, new, write or Write(), subresource=subresource)
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
        crd = self._crd_of(rtype) if rtype.custom else None
        if crd:
            self._finish_crd(crd)
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
