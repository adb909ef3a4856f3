"""The kubernetes PlntBackends of the Kubernetes API (``PLNT_INSTALLER_BACKENDS=kubernetes``).

Lists the cluster-scoped ``plntbackends.plnt.work`` objects through
``plnt_common.kube.PlntBackendReader``, keeping those of type kubernetes. It does not
watch or cache: each call lists again, so a PlntBackend applied with kubectl is seen at
the next operation.
"""

from plnt_common.kube import PlntBackendReader
from plnt_common.resources import PlntBackendSpec


class KubeApiTargets:
    """Implements ``kube_ports.KubernetesTargets`` over the Kubernetes API."""

    def __init__(self, *, reader: PlntBackendReader) -> None:
        self._reader = reader

    async def all(self) -> dict[str, PlntBackendSpec]:
        """Every valid kubernetes PlntBackend by name; invalid ones are logged and left out.

        Raises ``KubernetesUnavailable`` (retryable) when the API does not answer and
        ``BackendUnavailable`` when it refuses the list or serves no PlntBackends.
        """
        return {
            name: spec
            for name, spec in (await self._reader.all()).items()
            if spec.type == "kubernetes"
        }
