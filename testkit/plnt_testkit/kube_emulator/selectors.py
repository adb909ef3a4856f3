"""Label and field selectors as list and watch requests send them.

Labels: ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, ``k in (a,b)``, ``k notin (a,b)``,
comma separated and all required. Fields, with ``=``, ``==`` or ``!=``:
``metadata.name`` and ``metadata.namespace`` for every type (what ``kubectl wait`` and
``kubectl get NAME -w`` send), and what the API server adds per type: for core Events
``involvedObject.*`` (kind, namespace, name, uid, apiVersion, resourceVersion, fieldPath),
``reason``, ``reportingComponent``, ``source`` and ``type`` (``kubectl describe`` finds an
object's Events so), for namespaces ``status.phase``, for nodes ``spec.unschedulable``, for
pods ``spec.nodeName``, ``status.phase`` and the others the API server lists. A selector
the emulator cannot read, or a field the type does not support, raises ``ValueError`` (the
server answers 400).
"""

import re
from typing import Any

from plnt_testkit.kube_emulator.watch_hub import Match

_SET_TERM = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_COMMON_FIELDS = ("metadata.name", "metadata.namespace")
_TYPE_FIELDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "events"): (
        *(
            f"involvedObject.{f}"
            for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion")
        ),
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    ("", "namespaces"): ("status.phase",),
    ("", "nodes"): ("spec.unschedulable",),
    ("", "pods"): (
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
}
_ALIASES = {"source": "source.component"}


def _split_terms(selector: str) -> list[str]:
    """Commas separate terms, except inside ``in (...)`` value sets."""
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return [t.strip() for t in terms if t.strip()]


def _equality(term: str) -> tuple[str, str, str] | None:
    for op in ("!=", "==", "="):
        if op in term:
            key, value = term.split(op, 1)
            return key.strip(), op, value.strip()
    return None


def labels(obj: dict[str, Any]) -> dict[str, str]:
    found: dict[str, str] = obj.get("metadata", {}).get("labels") or {}
    return found


def _label_term(term: str) -> Match:
    found = _SET_TERM.match(term)
    if found:
        if found.group(1):
            raise ValueError(f"unable to parse requirement: {term!r}")
        key, op = found.group(2), found.group(3)
        values = {v.strip() for v in found.group(4).split(",") if v.strip()}
        if op == "in":
            return lambda obj: labels(obj).get(key) in values
        return lambda obj: labels(obj).get(key) not in values
    equality = _equality(term)
    if equality:
        key, op, value = equality
        if op == "!=":
            return lambda obj: labels(obj).get(key) != value
        return lambda obj: labels(obj).get(key) == value
    if term.startswith("!"):
        key = term[1:].strip()
        return lambda obj: key not in labels(obj)
    return lambda obj: term in labels(obj)


def field_value(obj: dict[str, Any], field: str) -> str:
    """The value a field selector compares: the dotted path's string, empty when absent."""
    node: Any = obj
    for part in _ALIASES.get(field, field).split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return "" if node is None else str(node)


def _field_term(term: str, supported: tuple[str, ...]) -> Match:
    equality = _equality(term)
    if equality is None or equality[0] not in supported:
        raise ValueError(f'field label not supported: "{equality[0] if equality else term}"')
    key, op, value = equality

    def matches(obj: dict[str, Any]) -> bool:
        actual = field_value(obj, key)
        return bool(actual != value if op == "!=" else actual == value)

    return matches


def parse_selectors(
    *, labels: str | None, fields: str | None, group: str = "", plural: str = ""
) -> Match:
    """One predicate for both selectors; an empty or absent selector matches everything.

    ``group`` and ``plural`` name the type, whose own field labels are then allowed."""
    supported = _COMMON_FIELDS + _TYPE_FIELDS.get((group, plural), ())
    terms = [_label_term(t) for t in _split_terms(labels or "")]
    terms += [_field_term(t, supported) for t in _split_terms(fields or "")]
    return lambda obj: all(term(obj) for term in terms)
