"""PlntBackend lookup in the embedded mode's resource store (``plnt-resources``).

Reads one cluster-scoped object by name through ``ResourceStore``; it does not watch,
cache, or judge whether the backend suits a run (``logic.check_backend`` does).
"""

from nats.errors import Error as NatsError
from pydantic import ValidationError

from plnt_common.errors import BackendUnavailable, BusUnavailable
from plnt_common.resource_store import ResourceStore
from plnt_common.resources import PlntBackendSpec
from plnt_common.workflow import describe_validation_error

KIND = "PlntBackend"


class StoredBackends:
    """Implements ``ports.BackendCatalog`` over a ``ResourceStore``."""

    def __init__(self, *, store: ResourceStore) -> None:
        self._store = store

    async def get(self, name: str) -> PlntBackendSpec | None:
        """The backend's spec, None when absent; ``BackendUnavailable`` when unreadable,
        ``BusUnavailable`` when the store does not answer."""
        try:
            stored = await self._store.get(KIND, None, name)
        except (NatsError, TimeoutError) as exc:
            raise BusUnavailable(f"cannot read PlntBackend {name!r}: {exc!r}") from None
        if stored is None:
            return None
        try:
            # Only the spec: metadata and any status are the store's business, not ours.
            return PlntBackendSpec.model_validate(stored.body.get("spec"))
        except ValidationError as exc:
            raise BackendUnavailable(
                f"PlntBackend {name!r} is invalid: {describe_validation_error(exc)}"
            ) from None
