"""A Kubernetes API emulator for tests: a real HTTP server the official client talks to.

It serves plnt.work/v1 ``workflowruns`` (namespaced) and ``plntbackends`` (cluster-scoped)
with their status subresource, core v1 ``events`` and coordination.k8s.io/v1 ``leases``
(and, when asked, core v1 ``services`` and ``endpoints``),
keeping the server rules plnt depends on: generation, a global resourceVersion, status
apart from spec, 409 on a stale update, finalizers, list-then-watch with bookmarks, and
410 Gone past the retained history (see ``store`` for the full list and what is left out).

It is not a cluster: nothing schedules, no controller runs, nothing is authenticated.

    with KubeEmulator() as emulator:
        kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig")
        api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
"""

from plnt_testkit.kube_emulator.emulator import KubeEmulator
from plnt_testkit.kube_emulator.types import (
    DEFAULT_TYPES,
    ENDPOINTS,
    EVENTS,
    LEASES,
    PLNT_BACKENDS,
    SERVICES,
    WORKFLOW_RUNS,
    ApiError,
    ResourceType,
)

__all__ = [
    "DEFAULT_TYPES",
    "ENDPOINTS",
    "EVENTS",
    "LEASES",
    "PLNT_BACKENDS",
    "SERVICES",
    "WORKFLOW_RUNS",
    "ApiError",
    "KubeEmulator",
    "ResourceType",
]
