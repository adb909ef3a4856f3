"""PlntBackend ``status.capacity`` on the Kubernetes API, through the status subresource.

A JSON merge patch of ``status.capacity`` only: the installer owns that field and nothing
else of the object (``spec`` stays the user's).
"""

import asyncio
import functools

from kubernetes import client

from plnt_common.capacity import BackendCapacity
from plnt_common.kube_errors import TRANSPORT_ERRORS, api_error
from plnt_installer.adapters.kube_errors import INSTALLER_ERRORS

GROUP, VERSION, PLURAL = "plnt.work", "v1", "plntbackends"
REQUEST_TIMEOUT_S = 10.0
MERGE_PATCH = "application/merge-patch+json"


class KubeBackendStatus:
    def __init__(self, *, api: client.ApiClient) -> None:
        self._objects = client.CustomObjectsApi(api)

    async def write(self, capacity: BackendCapacity) -> None:
        """Raises ``KubernetesUnavailable`` (retryable) or ``BackendUnavailable``; a
        PlntBackend deleted meanwhile raises ``ResourceNotFound``."""
        body = {"status": {"capacity": [c.status() for c in capacity.classes]}}
        call = functools.partial(
            self._objects.patch_cluster_custom_object_status,
            GROUP,
            VERSION,
            PLURAL,
            capacity.backend,
            body,
            _content_type=MERGE_PATCH,
            _request_timeout=REQUEST_TIMEOUT_S,
        )
        try:
            await asyncio.to_thread(call)
        except TRANSPORT_ERRORS as exc:
            raise api_error(
                exc,
                doing=f"writing PlntBackend {capacity.backend!r} status",
                kinds=INSTALLER_ERRORS,
            ) from None
