"""Pulled spec bytes in the ``plnt-specs`` object store, named by their digest.

Content addressing makes a stored spec final: an object under the digest holds the same
bytes, so the puller asks ``contains`` and writes only what is missing, as one atomic
batch where the server allows it (``object_batch``). It does not read specs back
(runners do) or delete.
"""

from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js.errors import ObjectNotFoundError
from nats.js.object_store import ObjectStore

from plnt_common import subjects
from plnt_common.bus.kv_batch import stream_allows_atomic
from plnt_common.bus.object_batch import object_stream, put_object
from plnt_common.errors import BusUnavailable


class ObjectStoreSpecs:
    """Implements ``ports.SpecStore`` over the ``plnt-specs`` object store."""

    def __init__(self, *, nc: Client, store: ObjectStore) -> None:
        self._nc = nc
        self._store = store
        self._atomic: bool | None = None  # asked of the server on the first write

    async def contains(self, *, digest: str) -> bool:
        try:
            await self._store.get_info(digest)
        except ObjectNotFoundError:
            return False
        except (NatsError, TimeoutError) as exc:
            raise BusUnavailable(f"cannot look up spec {digest}: {exc!r}") from None
        return True

    async def put(self, *, digest: str, data: bytes) -> None:
        bucket = subjects.SPECS_OBJECT_STORE
        try:
            if self._atomic is None:
                self._atomic = await stream_allows_atomic(self._nc, object_stream(bucket))
        except (NatsError, TimeoutError) as exc:
            raise BusUnavailable(f"cannot store spec {digest}: {exc!r}") from None
        if self._atomic:
            await put_object(self._nc, bucket, digest, data)
            return
        try:
            # Chunks first, metadata last: a crash mid-put leaves no visible object,
            # so the redelivered pull writes it again.
            await self._store.put(digest, data)
        except (NatsError, TimeoutError) as exc:
            raise BusUnavailable(f"cannot store spec {digest}: {exc!r}") from None
