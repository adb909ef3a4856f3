"""PlntBackend lookup in the Kubernetes API (``PLNT_PULLER_BACKENDS=kubernetes``).

Reads one cluster-scoped ``plntbackends.plnt.work`` object by name per call through
``plnt_common.kube.PlntBackendReader``; it does not watch or cache (a PlntBackend applied
with kubectl is seen by the next run), and it does not judge whether the backend suits a
run (``logic.check_backend`` does).
"""

from plnt_common.kube import PlntBackendReader
from plnt_common.resources import PlntBackendSpec


class KubernetesBackends:
    """Implements ``ports.BackendCatalog`` over the Kubernetes API."""

    def __init__(self, *, reader: PlntBackendReader) -> None:
        self._reader = reader

    async def get(self, name: str) -> PlntBackendSpec | None:
        """The backend's spec, None when the API has no PlntBackend ``name``.

        Raises ``BackendUnavailable`` when its spec is invalid (naming the field) or the
        API refuses the read (e.g. forbidden), ``KubernetesUnavailable`` (retryable) when
        the API does not answer.
        """
        return await self._reader.get(name)
