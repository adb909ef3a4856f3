"""The ``plnt-capacity`` view folded into PlntBackend bodies as ``status.capacity``.

The installer observes every backend at most 10 s apart into ``plnt-capacity``; ``plnt
get backends`` shows that view (the same every service reads), not a status written
elsewhere.
"""

from typing import Any

from pydantic import ValidationError

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.kv_snapshot import kv_snapshot
from plnt_common.capacity import RESERVATIONS_PREFIX, BackendCapacity


async def observed(bus: Bus) -> dict[str, BackendCapacity]:
    """Every backend's latest observation by name (unreadable entries left out)."""
    stored = await kv_snapshot(bus.nc, subjects.CAPACITY_BUCKET)
    found: dict[str, BackendCapacity] = {}
    for key, (_, value) in stored.items():
        if key.startswith(f"{RESERVATIONS_PREFIX}."):
            continue
        try:
            found[key] = BackendCapacity.model_validate_json(value)
        except ValidationError:
            continue
    return found


def with_capacity(
    bodies: list[dict[str, Any]], capacity: dict[str, BackendCapacity]
) -> list[dict[str, Any]]:
    """The bodies with ``status.capacity`` from the view where it has the backend."""
    merged = []
    for body in bodies:
        seen = capacity.get(body["metadata"]["name"])
        if seen is not None:
            status = dict(body.get("status") or {})
            status["capacity"] = [c.status() for c in seen.classes]
            body = {**body, "status": status}
        merged.append(body)
    return merged
