"""JSON parsing with a nesting limit, for request bodies and chat messages. Pure functions.

``json.loads`` recurses once per nesting level: a small body of nested ``[`` raises
``RecursionError`` (a 500 if nobody catches it), and a document just under Python's
recursion limit parses but makes every later walk of it slow and risky. ``load_limited``
refuses both with one clear reason. Counting brackets first keeps the common case (a
shallow body) at the cost of two byte scans; the walk runs only when the count alone
cannot rule out a deep document. Sizes are not checked here: the body reader bounds them.
"""

import json
from typing import Any

JSON_TYPE_NAMES: dict[type, str] = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


class JsonRejected(ValueError):
    """The text is not JSON, or nests deeper than allowed; the message says which."""


def load_limited(raw: bytes | str, *, max_depth: int) -> Any:
    """The JSON value of ``raw``. Raises ``JsonRejected`` when it is not JSON or nests
    deeper than ``max_depth``."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise _too_deep(max_depth) from None
    except ValueError as exc:  # UnicodeDecodeError included
        raise JsonRejected(f"not valid JSON: {exc}") from None
    if isinstance(raw, bytes):
        openers = raw.count(b"[") + raw.count(b"{")
    else:
        openers = raw.count("[") + raw.count("{")
    # Nesting needs an opener per level: few openers rule a deep document out at once.
    if openers > max_depth and nesting_depth(value, limit=max_depth) > max_depth:
        raise _too_deep(max_depth)
    return value


def load_object(raw: bytes, *, max_depth: int) -> dict[str, Any]:
    """Like ``load_limited``, and the value must be an object."""
    value = load_limited(raw, max_depth=max_depth)
    if not isinstance(value, dict):
        kind = JSON_TYPE_NAMES.get(type(value), type(value).__name__)
        raise JsonRejected(f"must be a JSON object, not {kind}")
    return value


def nesting_depth(value: Any, *, limit: int) -> int:
    """How deep arrays and objects nest in ``value`` (a scalar is 0), counting at most to
    ``limit + 1``. Iterative, so no document can exhaust the stack."""
    if not isinstance(value, (dict, list)):
        return 0
    deepest = 0
    pending: list[tuple[dict[str, Any] | list[Any], int]] = [(value, 1)]
    while pending:
        node, depth = pending.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        children = node.values() if isinstance(node, dict) else node
        pending.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def _too_deep(max_depth: int) -> JsonRejected:
    return JsonRejected(f"nests arrays and objects deeper than {max_depth} levels")
