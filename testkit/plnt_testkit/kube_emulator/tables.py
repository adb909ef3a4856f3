"""``meta.k8s.io/v1`` Tables: what ``kubectl get`` asks for and prints.

A custom resource's table is its CRD's ``additionalPrinterColumns`` after a ``Name``
column, as the API server builds it: each ``jsonPath`` is evaluated on the object (fields,
``[n]``, ``[*]`` and ``[?(@.field=="value")]`` filters), ``date`` cells are rendered as
an age (``5m``), a missing value is an empty cell. A CRD without columns gets ``Name`` and
``Age``. Built-in types get the server's columns for namespaces, events, leases and CRDs,
``Name`` and ``Age`` otherwise. Rows carry the object as ``includeObject`` asks: ``None``,
``Metadata`` (a PartialObjectMetadata, the default) or ``Object``.
"""

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from plnt_testkit.kube_emulator.types import ResourceType

TABLE_MEDIA = "as=Table"
_FILTER = re.compile(r'^\?\(@\.([\w.]+)\s*(==|!=)\s*["\']?([^"\']*)["\']?\)$')
Cell = Callable[[dict[str, Any]], Any]


def wants_table(accept: str) -> bool:
    """True when the Accept header's first choice is a Table (kubectl get, describe not)."""
    first = accept.split(",")[0].replace(" ", "")
    return TABLE_MEDIA in first and "g=meta.k8s.io" in first


def _tokens(path: str) -> list[str]:
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    tokens: list[str] = []
    for part in re.findall(r"\[[^\]]*\]|[^.\[\]]+", path):
        tokens.append(part[1:-1] if part.startswith("[") else part)
    return tokens


def evaluate(obj: Any, path: str) -> list[Any]:
    """Every value ``path`` (a CRD's simple JSONPath) finds in ``obj``."""
    found = [obj]
    for token in _tokens(path):
        nxt: list[Any] = []
        for node in found:
            if token == "*":
                nxt += list(node.values()) if isinstance(node, dict) else list(node or [])
            elif isinstance(node, list) and (match := _FILTER.match(token)):
                field, op, value = match.groups()
                for item in node:
                    actual = evaluate(item, field)
                    hit = bool(actual) and str(_scalar(actual[0])) == value
                    if hit == (op == "=="):
                        nxt.append(item)
            elif isinstance(node, list) and re.fullmatch(r"-?\d+", token):
                index = int(token)
                if -len(node) <= index < len(node):
                    nxt.append(node[index])
            elif isinstance(node, dict) and token in node:
                nxt.append(node[token])
        found = nxt
    return found


def _scalar(value: Any) -> Any:
    return str(value).lower() if isinstance(value, bool) else value


def age(timestamp: str | None, *, now: datetime | None = None) -> str:
    """A timestamp as kubectl shows an age: ``45s``, ``3m``, ``2h``, ``4d``."""
    try:  # RFC 3339, with or without fractional seconds (MicroTime)
        then = datetime.fromisoformat(str(timestamp).replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 120 * 60:
        return f"{seconds // 60}m"
    if seconds < 48 * 3600:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _cell(column: dict[str, Any]) -> Cell:
    kind = column.get("type", "string")

    def cell(obj: dict[str, Any]) -> Any:
        values = evaluate(obj, column["jsonPath"])
        if not values or values[0] is None:
            return None
        value = values[0]
        if kind == "date":
            return age(value) if isinstance(value, str) else None
        if kind == "string":
            return value if isinstance(value, str) else json.dumps(value)
        if kind == "integer":
            return int(value) if isinstance(value, (int, float)) else None
        if kind == "number":
            return float(value) if isinstance(value, (int, float)) else None
        if kind == "boolean":
            return bool(value)
        return value

    return cell


def _definition(
    name: str, kind: str, description: str, *, fmt: str = "", priority: int = 0
) -> dict[str, Any]:
    return {
        "name": name,
        "type": kind,
        "format": fmt,
        "description": description,
        "priority": priority,
    }


def _name_column() -> tuple[dict[str, Any], Cell]:
    return (
        _definition("Name", "string", "Name must be unique within a namespace.", fmt="name"),
        lambda obj: obj["metadata"].get("name"),
    )


def _age_column() -> tuple[dict[str, Any], Cell]:
    return (
        _definition("Age", "string", "CreationTimestamp of the object."),
        lambda obj: age(obj["metadata"].get("creationTimestamp")),
    )


def _path(name: str, path: str, *, priority: int = 0) -> tuple[dict[str, Any], Cell]:
    column = {"name": name, "type": "string", "jsonPath": path}
    return _definition(name, "string", name, priority=priority), _cell(column)


def _event_object(obj: dict[str, Any]) -> str:
    involved = obj.get("involvedObject") or {}
    return f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"


def _event_last_seen(obj: dict[str, Any]) -> str:
    return age(
        obj.get("lastTimestamp") or obj.get("eventTime") or obj["metadata"].get("creationTimestamp")
    )


def _columns(rtype: ResourceType) -> list[tuple[dict[str, Any], Cell]]:
    if rtype.printer_columns:
        return [_name_column()] + [
            (
                _definition(
                    c["name"],
                    c.get("type", "string"),
                    c.get("description", ""),
                    fmt=c.get("format", ""),
                    priority=int(c.get("priority", 0)),
                ),
                _cell(c),
            )
            for c in rtype.printer_columns
        ]
    if (rtype.group, rtype.plural) == ("", "namespaces"):
        return [_name_column(), _path("Status", ".status.phase"), _age_column()]
    if (rtype.group, rtype.plural) == ("", "events"):
        return [
            (_definition("Last Seen", "string", "Last seen"), _event_last_seen),
            _path("Type", ".type"),
            _path("Reason", ".reason"),
            (_definition("Object", "string", "The object the event is about"), _event_object),
            _path("Subobject", ".involvedObject.fieldPath", priority=1),
            _path("Source", ".source.component", priority=1),
            _path("Message", ".message"),
            (
                _definition("First Seen", "string", "First seen", priority=1),
                lambda obj: age(
                    obj.get("firstTimestamp") or obj["metadata"].get("creationTimestamp")
                ),
            ),
            (_definition("Count", "integer", "Count", priority=1), lambda obj: obj.get("count", 1)),
            (
                _definition("Name", "string", "Name", fmt="name", priority=1),
                lambda obj: obj["metadata"]["name"],
            ),
        ]
    if (rtype.group, rtype.plural) == ("coordination.k8s.io", "leases"):
        return [_name_column(), _path("Holder", ".spec.holderIdentity"), _age_column()]
    if rtype.plural == "customresourcedefinitions":
        return [
            _name_column(),
            (
                _definition("Created At", "date", "Created at"),
                lambda obj: obj["metadata"].get("creationTimestamp"),
            ),
        ]
    return [_name_column(), _age_column()]


def _row_object(obj: dict[str, Any], include: str) -> dict[str, Any] | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    }


def table(
    rtype: ResourceType,
    objects: list[dict[str, Any]],
    *,
    resource_version: str,
    include_object: str = "Metadata",
    headers: bool = True,
) -> dict[str, Any]:
    """The Table of ``objects``; ``headers`` False leaves out the column definitions
    (later events of a watch)."""
    columns = _columns(rtype)
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": [cell(obj) for _, cell in columns]}
        embedded = _row_object(obj, include_object)
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": [definition for definition, _ in columns] if headers else [],
        "rows": rows,
    }
