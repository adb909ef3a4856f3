"""Pulled spec bytes in the ``plnt-specs`` object store, named by their digest.

Content addressing makes a stored spec final: an object under the digest holds the same
bytes, so the puller asks ``contains`` and writes only what is missing. It does not read
specs back (runners do) or delete.
"""

from nats.errors import Error as NatsError
from nats.js.errors import ObjectNotFoundError
from nats.js.object_store import ObjectStore

from plnt_common.errors import BusUnavailable


class ObjectStoreSpecs:
    """Implements ``ports.SpecStore`` over a JetStream object store."""

    def __init__(self, *, store: ObjectStore) -> None:
        self._store = store

    async def contains(self, *, digest: str) -> bool:
        try:
            await self._store.get_info(digest)
        except ObjectNotFoundError:
            return False
        except (NatsError, TimeoutError) as exc:
            raise BusUnavailable(f"cannot look up spec {digest}: {exc!r}") from None
        return True

    async def put(self, *, digest: str, data: bytes) -> None:
        try:
            # Chunks first, metadata last: a crash mid-put leaves no visible object,
            # so the redelivered pull writes it again.
            await self._store.put(digest, data)
        except (NatsError, TimeoutError) as exc:
            raise BusUnavailable(f"cannot store spec {digest}: {exc!r}") from None
