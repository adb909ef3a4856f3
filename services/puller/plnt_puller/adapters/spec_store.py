"""Pulled spec bytes in the ``plnt-specs`` object store, named by their digest.

Content addressing makes the write idempotent: an object already under the digest holds
the same bytes, so it is left alone. It does not read specs back (runners do) or delete.
"""

from nats.errors import Error as NatsError
from nats.js.errors import ObjectNotFoundError
from nats.js.object_store import ObjectStore

from plnt_common.errors import BusUnavailable


class ObjectStoreSpecs:
    """Implements ``ports.SpecStore`` over a JetStream object store."""

    def __init__(self, *, store: ObjectStore) -> None:
        self._store = store

    async def put(self, *, digest: str, data: bytes) -> bool:
        """True when written now, False when present; ``BusUnavailable`` on bus errors."""
        try:
            try:
                await self._store.get_info(digest)
                return False
            except ObjectNotFoundError:
                pass
            # Chunks first, metadata last: a crash mid-put leaves no visible object,
            # so the redelivered pull writes it again.
            await self._store.put(digest, data)
        except (NatsError, TimeoutError) as exc:
            raise BusUnavailable(f"cannot store spec {digest}: {exc!r}") from None
        return True
