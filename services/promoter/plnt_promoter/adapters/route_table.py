"""The ``plnt-routes`` bucket with compare-and-set updates."""

from collections.abc import Callable

from nats.js.errors import KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from plnt_common.errors import Conflict
from plnt_common.metrics import SIDE_EFFECTS
from plnt_common.routes import RouteEntry, route_key

CAS_ATTEMPTS = 20


class RouteTable:
    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    async def get(self, *, namespace: str, name: str) -> tuple[RouteEntry | None, int]:
        """The entry and its revision; (None, 0) when there is none."""
        try:
            entry = await self._kv.get(route_key(namespace, name))
        except (KeyNotFoundError, KeyDeletedError):
            return None, 0
        if not entry.value:
            return None, 0
        return RouteEntry.model_validate_json(entry.value), entry.revision or 0

    async def update(
        self,
        *,
        namespace: str,
        name: str,
        change: Callable[[RouteEntry | None], RouteEntry | None],
        read: tuple[RouteEntry | None, int] | None = None,
        effect: str = "route_write",
    ) -> RouteEntry | None:
        """Apply ``change`` with compare-and-set, retrying on a concurrent write.

        ``read``: the entry and revision the caller just read, tried before reading again.
        ``effect``: the side-effect label a write counts under (``route_write`` for the
        saga's writes, ``route_follow`` for the route follower's).
        ``change`` returning None leaves the table as it is. Raises ``Conflict`` when the
        entry keeps changing.
        """
        key = route_key(namespace, name)
        for _ in range(CAS_ATTEMPTS):
            current, revision = read or await self.get(namespace=namespace, name=name)
            read = None
            updated = change(current)
            if updated is None or updated == current:
                return current
            payload = updated.model_dump_json().encode()
            try:
                if revision:
                    await self._kv.update(key, payload, last=revision)
                else:
                    await self._kv.create(key, payload)
            except KeyWrongLastSequenceError:
                continue
            SIDE_EFFECTS.labels("promoter", effect).inc()
            return updated
        raise Conflict(f"route {key} kept changing")

    async def remove(self, *, namespace: str, name: str) -> None:
        """Delete the route; the router stops serving the workflow."""
        await self._kv.delete(route_key(namespace, name))
