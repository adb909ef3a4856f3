"""plnt's door to the Kubernetes API for reading PlntBackends: configuration and reads.

``api_client`` resolves the client configuration the way kubectl and client-go do: an
explicit kubeconfig path wins; otherwise the KUBECONFIG variable or ~/.kube/config; when
neither exists, the pod's in-cluster service account. ``PlntBackendReader`` reads the
cluster-scoped ``plntbackends.plnt.work`` objects through ``CustomObjectsApi``. The
``kubernetes`` client blocks, so every call runs on a worker thread with a request
timeout, and its failures become the project's errors here, at the boundary.

It only reads: it does not watch, cache or write (the watcher's adapters do that for
WorkflowRuns), and it does not judge whether a backend suits a run. Services import it
only in Kubernetes mode, so the embedded mode never loads the ``kubernetes`` client.
"""

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from pydantic import ValidationError

from plnt_common.errors import BackendUnavailable, KubernetesUnavailable
from plnt_common.kube_errors import TRANSPORT_ERRORS, ErrorKinds, api_error
from plnt_common.logs import get_logger
from plnt_common.resources import PlntBackendSpec
from plnt_common.workflow import describe_validation_error

log = get_logger(__name__)

GROUP = "plnt.work"
VERSION = "v1"
BACKENDS = "plntbackends"
REQUEST_TIMEOUT_S = 30.0
LIST_PAGE = 500
"""Objects per list request; the API server hands out the rest with a continue token."""
BACKEND_READS = ErrorKinds(
    forbidden_hint=f"the service account needs get and list on {BACKENDS}.{GROUP}"
)
"""Failed PlntBackend reads: refusals are ``BackendUnavailable``, the rest retryable."""


def api_client(*, kubeconfig: str = "", context: str = "", user_agent: str) -> client.ApiClient:
    """A client for the API server; raises ``KubernetesUnavailable`` without configuration.

    ``kubeconfig`` is a file path ("" for the standard resolution), ``context`` one of its
    contexts ("" for its current-context). Nothing is sent to the server yet.
    """
    configuration = client.Configuration()
    try:
        if kubeconfig:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig,
                context=context or None,
                client_configuration=configuration,
            )
        else:
            try:
                config.load_kube_config(  # type: ignore[no-untyped-call]
                    context=context or None, client_configuration=configuration
                )
            except ConfigException:
                config.load_incluster_config(  # type: ignore[no-untyped-call]
                    client_configuration=configuration
                )
    except ConfigException as exc:
        raise KubernetesUnavailable(f"no usable Kubernetes configuration: {exc}") from None
    api = client.ApiClient(configuration)
    api.user_agent = user_agent
    return api


class PlntBackendReader:
    """Reads PlntBackend specs from the API server through one ``ApiClient``: the
    Kubernetes adapter of ``plnt_common.backend_catalog.BackendCatalog``."""

    def __init__(
        self, *, api: client.ApiClient, request_timeout_s: float = REQUEST_TIMEOUT_S
    ) -> None:
        self._api = api
        self._objects = client.CustomObjectsApi(api)
        self._timeout = request_timeout_s

    async def get(self, name: str) -> PlntBackendSpec | None:
        """The spec of PlntBackend ``name``; None when the API has no such object.

        Raises ``BackendUnavailable`` when the spec is not a valid PlntBackend (the
        message names the field) or the API refuses the read, ``KubernetesUnavailable``
        (retryable) when the API does not answer.
        """
        doing = f"reading PlntBackend {name!r}"
        try:
            body = await self._call(self._objects.get_cluster_custom_object, name, doing=doing)
        except _NotFound:
            return None
        try:
            return _spec_of(body)
        except ValidationError as exc:
            raise BackendUnavailable(
                f"PlntBackend {name!r} has an invalid spec: {describe_validation_error(exc)}"
            ) from None

    async def all(self) -> dict[str, PlntBackendSpec]:
        """Every PlntBackend with a valid spec, by name; invalid ones are logged and left out.

        Raises ``BackendUnavailable`` when the API refuses the list or does not serve
        PlntBackends at all (the CRD is missing), ``KubernetesUnavailable`` (retryable)
        when it does not answer.
        """
        found: dict[str, PlntBackendSpec] = {}
        for item in await self._list():
            name = str((item.get("metadata") or {}).get("name", ""))
            try:
                found[name] = _spec_of(item)
            except ValidationError as exc:
                log.warning(
                    "backend.unreadable", backend=name, error=describe_validation_error(exc)
                )
        return found

    async def labels(self) -> dict[str, dict[str, str]]:
        """Every PlntBackend's ``metadata.labels`` by name; raises like ``all``."""
        return {
            str((item.get("metadata") or {}).get("name", "")): dict(
                (item.get("metadata") or {}).get("labels") or {}
            )
            for item in await self._list()
        }

    async def close(self) -> None:
        """Release the client's connections; the reader is not used afterwards."""
        await asyncio.to_thread(self._api.close)

    # --- helpers ----------------------------------------------------------------------

    async def _list(self) -> list[dict[str, Any]]:
        doing = f"listing {BACKENDS}.{GROUP}"
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            try:
                page = await self._call(
                    self._objects.list_cluster_custom_object,
                    limit=LIST_PAGE,
                    _continue=token,
                    doing=doing,
                )
            except _NotFound:
                raise BackendUnavailable(
                    f"{doing}: the Kubernetes API does not serve them; is the CRD installed "
                    "(kubectl apply -f crds/)?"
                ) from None
            items.extend(item for item in page.get("items") or [] if isinstance(item, dict))
            token = (page.get("metadata") or {}).get("continue") or None
            if token is None:
                return items

    async def _call(
        self, function: Callable[..., object], *args: Any, doing: str, **kwargs: Any
    ) -> dict[str, Any]:
        """One bounded call on a worker thread; its body, or ``_NotFound`` on a 404."""
        call = functools.partial(
            function, GROUP, VERSION, BACKENDS, *args, _request_timeout=self._timeout, **kwargs
        )
        try:
            body = await asyncio.to_thread(call)
        except TRANSPORT_ERRORS as exc:
            if isinstance(exc, ApiException) and exc.status == 404:
                raise _NotFound from None
            raise api_error(exc, doing=doing, kinds=BACKEND_READS) from None
        if not isinstance(body, dict):
            raise BackendUnavailable(f"{doing}: the Kubernetes API answered with {body!r}")
        return body


class _NotFound(Exception):
    """A 404 from the API: the object (or, for a list, the resource type) does not exist."""


def _spec_of(body: dict[str, Any]) -> PlntBackendSpec:
    # Only the spec: metadata and status are the API server's business, not ours.
    return PlntBackendSpec.model_validate(body.get("spec"))
