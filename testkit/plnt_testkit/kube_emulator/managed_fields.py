"""``metadata.managedFields`` as the API server keeps them for non-apply writes.

Each write's field manager owns the fields it set or changed (operation ``Update``, one
entry per manager, API version and subresource); a field it changes is taken from every
other manager, a field removed is owned by nobody, and a manager owning nothing loses its
entry. Fields are written as ``FieldsV1``: ``f:<name>`` for a field, ``k:{...}`` for an
item of a list of objects keyed by ``name`` or ``type`` (conditions), ``.`` for a map the
manager created. Other lists are atomic. Server-side apply (operation ``Apply``, conflicts)
is not done. The manager of a request without ``fieldManager`` is its User-Agent up to the
first ``/``, as the API server derives it.
"""

import json
from typing import Any, Literal

Path = tuple[str, ...]
_SKIPPED_METADATA = {
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
}
_LIST_KEYS = ("type", "name")


def manager_name(field_manager: str | None, user_agent: str) -> str:
    """The manager a write is recorded under: ``fieldManager``, else the User-Agent's
    program name (``kubectl/v1.37.1 (linux/amd64)`` reads ``kubectl``)."""
    if field_manager:
        return field_manager
    return user_agent.split("/")[0][:128] or "unknown"


def _list_key(items: list[Any]) -> str | None:
    for key in _LIST_KEYS:
        if items and all(isinstance(i, dict) and isinstance(i.get(key), str) for i in items):
            keys = [i[key] for i in items]
            if len(set(keys)) == len(keys):
                return key
    return None


def _walk(value: Any, path: Path, into: dict[Path, Any]) -> None:
    """Every node of ``value`` below ``path``: maps as ``{}`` markers, leaves by value."""
    if isinstance(value, dict):
        into[path] = {}
        for key, child in value.items():
            if not path and key in ("apiVersion", "kind"):
                continue
            if path == ("f:metadata",) and key in _SKIPPED_METADATA:
                continue
            _walk(child, (*path, f"f:{key}"), into)
        return
    if isinstance(value, list) and (key := _list_key(value)):
        into[path] = []  # a keyed list: its items are fields of their own
        for item in value:
            _walk(item, (*path, "k:" + json.dumps({key: item[key]}, separators=(",", ":"))), into)
        return
    into[path] = ("leaf", json.dumps(value, sort_keys=True))


def nodes(body: dict[str, Any], *, status: bool) -> dict[Path, Any]:
    """The fields a write of ``body`` may own: everything but status, or status only."""
    found: dict[Path, Any] = {}
    _walk(body, (), found)
    found.pop((), None)
    return {
        path: value
        for path, value in found.items()
        if (path[0] == "f:status") == status and path != ("f:metadata",)
    }


def changed(before: dict[Path, Any], after: dict[Path, Any]) -> set[Path]:
    """Fields present in ``after`` that were absent or different in ``before``."""
    return {path for path, value in after.items() if before.get(path) != value}


def _render(paths: set[Path]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for token in path:
            node = node.setdefault(token, {})
        if any(other[: len(path)] == path and other != path for other in paths):
            node["."] = {}  # the manager owns the map itself, not only fields in it
    return tree


def _flatten(tree: dict[str, Any], prefix: Path = ()) -> set[Path]:
    paths: set[Path] = set()
    for token, child in tree.items():
        if token == ".":
            paths.add(prefix)
            continue
        path = (*prefix, token)
        if child and set(child) != {"."}:
            paths |= _flatten(child, path)
        else:
            paths.add(path)
    return paths


def record(
    entries: list[dict[str, Any]],
    *,
    before: dict[str, Any] | None,
    after: dict[str, Any],
    manager: str,
    api_version: str,
    subresource: Literal["status"] | None,
    now: str,
    operation: Literal["Update"] = "Update",
) -> list[dict[str, Any]]:
    """The managed fields after ``manager`` wrote ``after`` over ``before``."""
    status = subresource == "status"
    old_nodes = nodes(before, status=status) if before is not None else {}
    new_nodes = nodes(after, status=status)
    taken = changed(old_nodes, new_nodes)
    result: list[dict[str, Any]] = []
    mine: set[Path] = set()
    for entry in entries:
        owned = _flatten(entry.get("fieldsV1") or {})
        same = (
            entry.get("manager") == manager
            and entry.get("operation") == operation
            and entry.get("apiVersion") == api_version
            and entry.get("subresource") == subresource
        )
        # a field this write did not touch stays with its owner, unless it is gone now
        part_of_write = {p for p in owned if (p[0] == "f:status") == status}
        kept = {p for p in owned - part_of_write} | {
            p for p in part_of_write if p in new_nodes and p not in taken
        }
        if same:
            mine = kept
            continue
        if kept:
            result.append({**entry, "fieldsV1": _render(kept)})
    mine |= taken
    if mine:
        entry = {
            "manager": manager,
            "operation": operation,
            "apiVersion": api_version,
            "time": now,
            "fieldsType": "FieldsV1",
            "fieldsV1": _render(mine),
        }
        if subresource:
            entry["subresource"] = subresource
        result.append(entry)
    return result
