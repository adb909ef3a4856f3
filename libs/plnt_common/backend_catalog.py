"""The PlntBackend catalog: the one port the puller and the installer read backends through.

Two adapters implement ``BackendCatalog``: ``StoredBackends`` over the embedded mode's
resource store (``plnt-resources``, here) and ``plnt_common.kube.PlntBackendReader`` over
the Kubernetes API (imported only in Kubernetes mode, so the embedded mode never loads the
``kubernetes`` client). Neither watches or caches: each call reads again, so a PlntBackend
added or changed is seen at the next operation. Neither judges whether a backend suits a
run (the puller's ``logic.check_backend`` does).
"""

from typing import Any, Protocol

from nats.errors import Error as NatsError
from pydantic import ValidationError

from plnt_common.errors import BackendUnavailable, BusUnavailable
from plnt_common.logs import get_logger
from plnt_common.resource_store import ResourceStore
from plnt_common.resources import PlntBackendSpec
from plnt_common.workflow import describe_validation_error

log = get_logger(__name__)

KIND = "PlntBackend"


class BackendCatalog(Protocol):
    """The PlntBackend resources a run may deploy onto."""

    async def get(self, name: str) -> PlntBackendSpec | None:
        """The backend's spec; None when no PlntBackend of that name exists.

        Raises ``BackendUnavailable`` when it exists but cannot be read as a PlntBackend
        (or the Kubernetes API refuses the read), ``BusUnavailable`` or
        ``KubernetesUnavailable`` (retryable) when the store or the API did not answer.
        """
        ...

    async def all(self) -> dict[str, PlntBackendSpec]:
        """Every PlntBackend with a valid spec by name; invalid ones are logged and left out.

        Raises like ``get``; the Kubernetes adapter also raises ``BackendUnavailable``
        when the API does not serve PlntBackends at all (the CRD is missing).
        """
        ...

    async def labels(self) -> dict[str, dict[str, str]]:
        """Every PlntBackend's ``metadata.labels`` by name, what a ``spec.placement.selector``
        is matched against. Raises like ``all``."""
        ...


class StoredBackends:
    """Implements ``BackendCatalog`` over a ``ResourceStore``."""

    def __init__(self, *, store: ResourceStore) -> None:
        self._store = store

    async def get(self, name: str) -> PlntBackendSpec | None:
        try:
            stored = await self._store.get(KIND, None, name)
        except (NatsError, TimeoutError) as exc:
            raise BusUnavailable(f"cannot read PlntBackend {name!r}: {exc!r}") from None
        if stored is None:
            return None
        try:
            return _spec_of(stored.body)
        except ValidationError as exc:
            raise BackendUnavailable(
                f"PlntBackend {name!r} is invalid: {describe_validation_error(exc)}"
            ) from None

    async def all(self) -> dict[str, PlntBackendSpec]:
        try:
            stored = await self._store.list(KIND)
        except (NatsError, TimeoutError) as exc:
            raise BusUnavailable(f"cannot list PlntBackends: {exc!r}") from None
        found: dict[str, PlntBackendSpec] = {}
        for obj in stored:
            name = str(obj.metadata.get("name", ""))
            try:
                found[name] = _spec_of(obj.body)
            except ValidationError as exc:
                log.warning(
                    "backend.unreadable", backend=name, error=describe_validation_error(exc)
                )
        return found

    async def labels(self) -> dict[str, dict[str, str]]:
        try:
            stored = await self._store.list(KIND)
        except (NatsError, TimeoutError) as exc:
            raise BusUnavailable(f"cannot list PlntBackends: {exc!r}") from None
        return {
            str(obj.metadata.get("name", "")): dict(obj.metadata.get("labels") or {})
            for obj in stored
        }


class KubernetesOnly:
    """The catalog's backends of type kubernetes: where the installer's Helm backend installs.

    ``catalog`` is the adapter it reads through.
    """

    def __init__(self, catalog: BackendCatalog) -> None:
        self.catalog = catalog

    async def all(self) -> dict[str, PlntBackendSpec]:
        return {
            name: spec
            for name, spec in (await self.catalog.all()).items()
            if spec.type == "kubernetes"
        }


def _spec_of(body: dict[str, Any]) -> PlntBackendSpec:
    # Only the spec: metadata and any status are the store's business, not ours.
    return PlntBackendSpec.model_validate(body.get("spec"))
