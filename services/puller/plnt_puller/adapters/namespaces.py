"""Namespace labels read from the Kubernetes API, for ``PlntBackend.spec.allowedNamespaces``.

One ``get`` of the run's Namespace per pull that needs it (a backend with
``allowedNamespaces``), on a worker thread with a request timeout, through the puller's
``ApiClient``. Nothing is cached: a namespace relabelled counts from the next pull on.
"""

import asyncio

from kubernetes import client

from plnt_common.errors import BackendNotAllowed, ResourceNotFound
from plnt_common.kube import REQUEST_TIMEOUT_S
from plnt_common.kube_errors import TRANSPORT_ERRORS, ErrorKinds, api_error

NAMESPACE_READS = ErrorKinds(
    refused=BackendNotAllowed,
    forbidden_hint="the puller's service account needs get on namespaces",
)
"""Failed Namespace reads: refusals are ``BackendNotAllowed`` (nothing shows the run is
allowed), the rest retryable."""


class KubeNamespaceLabels:
    """Implements ``ports.NamespaceLabels`` over the Kubernetes API."""

    def __init__(
        self, *, api: client.ApiClient, request_timeout_s: float = REQUEST_TIMEOUT_S
    ) -> None:
        self._core = client.CoreV1Api(api)
        self._timeout = request_timeout_s

    async def labels(self, *, namespace: str) -> dict[str, str]:
        """See ``ports.NamespaceLabels.labels``."""
        doing = f"reading Namespace {namespace} for allowedNamespaces"
        try:
            body = await asyncio.to_thread(
                self._core.read_namespace, namespace, _request_timeout=self._timeout
            )
        except TRANSPORT_ERRORS as exc:
            error = api_error(exc, doing=doing, kinds=NAMESPACE_READS)
            if isinstance(error, ResourceNotFound):
                raise BackendNotAllowed(
                    f"namespace {namespace!r} not found: its labels cannot be checked "
                    "against allowedNamespaces"
                ) from None
            raise error from None
        return dict((body.metadata and body.metadata.labels) or {})
