"""Label and field selectors as list and watch requests send them.

Labels: ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, ``k in (a,b)``, ``k notin (a,b)``,
comma separated and all required. Fields: ``metadata.name`` and ``metadata.namespace``
with ``=``, ``==`` or ``!=``, which is what the API server supports for every type. A
selector the emulator cannot read raises ``ValueError`` (the server answers 400).
"""

import re
from typing import Any

from plnt_testkit.kube_emulator.watch_hub import Match

_SET_TERM = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_FIELDS = {"metadata.name": "name", "metadata.namespace": "namespace"}


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


def _field_term(term: str) -> Match:
    equality = _equality(term)
    if equality is None or equality[0] not in _FIELDS:
        raise ValueError(f"field label not supported: {term!r}")
    key, op, value = equality
    attribute = _FIELDS[key]

    def matches(obj: dict[str, Any]) -> bool:
        actual = obj.get("metadata", {}).get(attribute) or ""
        return bool(actual != value if op == "!=" else actual == value)

    return matches


def parse_selectors(*, labels: str | None, fields: str | None) -> Match:
    """One predicate for both selectors; an empty or absent selector matches everything."""
    terms = [_label_term(t) for t in _split_terms(labels or "")]
    terms += [_field_term(t) for t in _split_terms(fields or "")]
    return lambda obj: all(term(obj) for term in terms)
