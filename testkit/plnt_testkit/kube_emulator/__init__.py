"""A Kubernetes API emulator for tests: a real HTTP server the official client and the
real ``kubectl`` talk to.

It serves core v1 ``namespaces``, ``apiextensions.k8s.io/v1`` CRDs and every type a CRD
applied to it declares (by default the project's, from ``crds``: plnt.work/v1
``workflowruns`` and ``plntbackends``), core v1 ``events`` and coordination.k8s.io/v1
``leases`` (and, when asked, other built-in types such as ``services``, ``endpoints``,
``nodes`` and ``pods``: nothing schedules them, a test writes ``spec.nodeName`` and status).
It keeps the server rules plnt depends on: generation, a global resourceVersion, status
apart from spec, 409 on a stale update, finalizers, list-then-watch with bookmarks, and
410 Gone past the retained history; it returns objects as a real server does
(``managedFields``, ``uid``, ``creationTimestamp``) and admits custom resources through
their CRD's schema (pruning, defaults, validation, CEL; ``schema``) with
``fieldValidation``. For kubectl it answers discovery, OpenAPI v3, Tables, watch lists
and Event field selectors (see ``store`` and ``server`` for the full list and what is
left out).

It is not a cluster: nothing schedules, no controller runs (no garbage collector, no
namespace controller), nothing is authenticated, and request bodies are JSON only
(``kubectl create namespace`` sends protobuf and is refused: apply a Namespace manifest).

    with KubeEmulator() as emulator:
        kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig")
        api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
"""

from plnt_testkit.kube_emulator.crds import project_crds
from plnt_testkit.kube_emulator.emulator import KubeEmulator
from plnt_testkit.kube_emulator.types import (
    CUSTOM_RESOURCE_DEFINITIONS,
    DEFAULT_TYPES,
    ENDPOINTS,
    EVENTS,
    LEASES,
    NAMESPACES,
    NODES,
    PLNT_BACKENDS,
    PODS,
    SECRETS,
    SERVICES,
    WORKFLOW_RUNS,
    ApiError,
    ResourceType,
)

__all__ = [
    "CUSTOM_RESOURCE_DEFINITIONS",
    "DEFAULT_TYPES",
    "ENDPOINTS",
    "EVENTS",
    "LEASES",
    "NAMESPACES",
    "NODES",
    "PLNT_BACKENDS",
    "PODS",
    "SECRETS",
    "SERVICES",
    "WORKFLOW_RUNS",
    "ApiError",
    "KubeEmulator",
    "ResourceType",
    "project_crds",
]
