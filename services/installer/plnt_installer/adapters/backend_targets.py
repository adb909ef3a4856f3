"""The kubernetes PlntBackends of the embedded resource store (``plnt-resources``).

Lists the cluster-scoped PlntBackend objects the puller resolves runs against, keeping
those of type kubernetes. It does not watch or cache: each call reads the store, so a
PlntBackend added or changed is seen at the next operation.
"""

from nats.errors import Error as NatsError
from pydantic import ValidationError

from plnt_common.errors import BusUnavailable
from plnt_common.logs import get_logger
from plnt_common.resource_store import ResourceStore
from plnt_common.resources import PlntBackendSpec

log = get_logger(__name__)

KIND = "PlntBackend"


class StoredTargets:
    """Implements ``kube_ports.KubernetesTargets`` over a ``ResourceStore``."""

    def __init__(self, *, store: ResourceStore) -> None:
        self._store = store

    async def all(self) -> dict[str, PlntBackendSpec]:
        """Every valid kubernetes PlntBackend by name; ``BusUnavailable`` if the store is down."""
        try:
            stored = await self._store.list(KIND)
        except (NatsError, TimeoutError) as exc:
            raise BusUnavailable(f"cannot list PlntBackends: {exc!r}") from None
        found: dict[str, PlntBackendSpec] = {}
        for obj in stored:
            name = str(obj.metadata.get("name", ""))
            try:
                spec = PlntBackendSpec.model_validate(obj.body.get("spec"))
            except ValidationError as exc:
                log.warning("backend.unreadable", backend=name, error=str(exc))
                continue
            if spec.type == "kubernetes":
                found[name] = spec
        return found
