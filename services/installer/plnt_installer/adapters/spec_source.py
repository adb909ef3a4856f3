"""Pulled workflow specs read back from the ``plnt-specs`` object store, by digest.

The puller stores each spec under its sha256 digest; the Helm backend reads it to hand
the runner its workflow.yaml. Read-only: it never writes or deletes a spec.
"""

from nats.errors import Error as NatsError
from nats.js.errors import ObjectDeletedError, ObjectNotFoundError
from nats.js.object_store import ObjectStore

from plnt_common.errors import BusUnavailable, SpecNotFound
from plnt_common.subjects import SPECS_OBJECT_STORE


class ObjectStoreSpecSource:
    """Implements ``kube_ports.SpecSource`` over a JetStream object store."""

    def __init__(self, *, store: ObjectStore) -> None:
        self._store = store

    async def get(self, digest: str) -> bytes:
        """The bytes under ``digest``; ``SpecNotFound`` if absent, ``BusUnavailable`` if down."""
        try:
            result = await self._store.get(digest)
        except (ObjectNotFoundError, ObjectDeletedError):
            raise SpecNotFound(
                f"spec {digest} is not in the object store {SPECS_OBJECT_STORE}"
            ) from None
        except (NatsError, TimeoutError, OSError) as exc:
            raise BusUnavailable(f"reading spec {digest} failed: {exc!r}") from None
        return bytes(result.data or b"")
