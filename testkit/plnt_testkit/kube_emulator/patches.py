"""The two patch formats the emulator applies: JSON merge patch and JSON patch.

RFC 7386 (``application/merge-patch+json``) and RFC 6902 (``application/json-patch+json``),
as the API server applies them to a stored object. Errors raise ``PatchError`` with a
message naming the operation; the server turns it into a 422 Invalid. Strategic merge
patch is not here: the server applies it as a merge patch to built-in types only.
"""

import copy
from typing import Any


class PatchError(ValueError):
    """The patch document is malformed or one of its operations cannot apply."""


def merge_patch(target: Any, patch: Any) -> Any:
    """``target`` with ``patch`` merged in: objects merge, null deletes, the rest replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _tokens(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f"JSON pointer {pointer!r} must start with '/'")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _index(container: list[Any], token: str, *, for_insert: bool) -> int:
    if token == "-" and for_insert:
        return len(container)
    if not token.isdigit() or (token.startswith("0") and token != "0"):
        raise PatchError(f"array index {token!r} is not a number")
    index = int(token)
    limit = len(container) if for_insert else len(container) - 1
    if index > limit:
        raise PatchError(f"array index {index} is out of range")
    return index


def _parent(document: Any, pointer: str) -> tuple[Any, str]:
    tokens = _tokens(pointer)
    if not tokens:
        raise PatchError("the operation needs a path below the document root")
    node = document
    for token in tokens[:-1]:
        node = _child(node, token, pointer)
    return node, tokens[-1]


def _child(node: Any, token: str, pointer: str) -> Any:
    if isinstance(node, dict):
        if token not in node:
            raise PatchError(f"path {pointer!r} does not exist")
        return node[token]
    if isinstance(node, list):
        return node[_index(node, token, for_insert=False)]
    raise PatchError(f"path {pointer!r} goes through a scalar")


def _get(document: Any, pointer: str) -> Any:
    node = document
    for token in _tokens(pointer):
        node = _child(node, token, pointer)
    return node


def _add(document: Any, pointer: str, value: Any) -> Any:
    if pointer == "":
        return value
    parent, token = _parent(document, pointer)
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, token, for_insert=True), value)
    else:
        raise PatchError(f"cannot add below scalar at {pointer!r}")
    return document


def _remove(document: Any, pointer: str) -> Any:
    parent, token = _parent(document, pointer)
    if isinstance(parent, dict):
        if token not in parent:
            raise PatchError(f"cannot remove {pointer!r}: it does not exist")
        del parent[token]
    elif isinstance(parent, list):
        del parent[_index(parent, token, for_insert=False)]
    else:
        raise PatchError(f"cannot remove below scalar at {pointer!r}")
    return document


def json_patch(document: Any, operations: Any) -> Any:
    """``document`` after every operation, applied in order to a copy; all or nothing."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch is a list of operations")
    result = copy.deepcopy(document)
    for number, operation in enumerate(operations):
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise PatchError(f"operation {number} needs 'op' and 'path'")
        op, path = operation["op"], operation["path"]
        if op in ("add", "replace", "test") and "value" not in operation:
            raise PatchError(f"operation {number} ({op}) needs a 'value'")
        value = copy.deepcopy(operation.get("value"))
        if op == "add":
            result = _add(result, path, value)
        elif op == "remove":
            result = _remove(result, path)
        elif op == "replace":
            _get(result, path)  # replace requires the target to exist
            result = _add(_remove(result, path), path, value) if path else value
        elif op in ("move", "copy"):
            source = operation.get("from")
            if not isinstance(source, str):
                raise PatchError(f"operation {number} ({op}) needs 'from'")
            moved = copy.deepcopy(_get(result, source))
            if op == "move":
                result = _remove(result, source)
            result = _add(result, path, moved)
        elif op == "test":
            if _get(result, path) != value:
                raise PatchError(f"test operation {number} failed: {path!r} is not {value!r}")
        else:
            raise PatchError(f"unknown operation {op!r}")
    return result
