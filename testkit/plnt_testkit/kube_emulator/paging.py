"""``limit`` and ``continue`` on lists, shaped like the API server's.

A page holds at most ``limit`` items; when more remain, ``metadata.continue`` carries an
opaque token (the list's resourceVersion and the last key served) and
``remainingItemCount`` how many are left. A continued page lists from after that key at
the token's resourceVersion; once the watch history is compacted past that version the
token is stale and the answer is 410 Expired, as etcd's compaction makes it on a real
server. (The emulator keeps no snapshots: a continued page shows objects as they are
now, which a real server would show as of the first page.)
"""

import base64
import json
from typing import Any

from plnt_testkit.kube_emulator.types import ApiError


def _key(body: dict[str, Any]) -> list[str]:
    meta = body["metadata"]
    return [str(meta.get("namespace") or ""), str(meta["name"])]


def page(
    items: list[dict[str, Any]],
    version: int,
    *,
    limit: str | None,
    token: str | None,
    compacted: int,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The items of this page (``items`` sorted by key) and the list's metadata."""
    meta: dict[str, Any] = {"resourceVersion": str(version)}
    if token:
        start_version, after = _decode(token)
        if start_version < compacted:
            raise ApiError(
                410,
                "Expired",
                "The provided continue parameter is too old to display a consistent list "
                "result. You can start a new list without the continue parameter.",
            )
        meta["resourceVersion"] = str(start_version)
        items = [item for item in items if _key(item) > after]
    size = _limit(limit)
    if size and len(items) > size:
        served = items[:size]
        meta["continue"] = _encode(int(meta["resourceVersion"]), _key(served[-1]))
        meta["remainingItemCount"] = len(items) - size
        return served, meta
    return items, meta


def _limit(limit: str | None) -> int:
    if not limit:
        return 0
    try:
        size = int(limit)
    except ValueError:
        raise ApiError(400, "BadRequest", f"limit: invalid value {limit!r}") from None
    return max(0, size)


def _encode(version: int, after: list[str]) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": version, "start": after})
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _decode(token: str) -> tuple[int, list[str]]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), [str(part) for part in data["start"]]
    except (ValueError, KeyError, TypeError):
        raise ApiError(400, "BadRequest", "continue key is not valid") from None
