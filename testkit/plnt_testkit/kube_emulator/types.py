"""The resource types an emulator serves, and the API error shape it answers with.

A ``ResourceType`` says where a type lives in the URL space, how discovery names it, and
which server rules apply to it (custom resource or built-in, namespaced, status
subresource). ``ApiError`` carries what becomes a ``metav1.Status`` body. Nothing here does
I/O or keeps state.
"""

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class ResourceType:
    """One served type: ``group`` is empty for the core API (``/api/v1``).

    Two types are the same type when group, version and plural are: what discovery says
    of it (short names, categories, printer columns) does not make another type.
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    status_subresource: bool = field(default=False, compare=False)
    custom: bool = field(default=False, compare=False)
    """Custom resources track ``generation``, require ``resourceVersion`` on update and
    reject strategic merge patch, as CRD-backed types do on a real server."""
    generation: bool = field(default=False, compare=False)
    status_on_create: bool = field(default=False, compare=False)
    """Create keeps the body's status although a status subresource exists, as for Nodes
    (the kubelet registers its node with capacity and allocatable)."""
    """A built-in type that keeps ``metadata.generation`` too (custom resources always do)."""
    singular: str = field(default="", compare=False)
    short_names: tuple[str, ...] = field(default=(), compare=False)
    categories: tuple[str, ...] = field(default=(), compare=False)
    printer_columns: tuple[dict[str, Any], ...] = field(default=(), compare=False)
    """A CRD's ``additionalPrinterColumns`` of this version (name, type, jsonPath, ...)."""

    @property
    def keeps_generation(self) -> bool:
        return self.custom or self.generation

    @property
    def singular_name(self) -> str:
        return self.singular or self.kind.lower()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """The name the API server uses in messages, e.g. ``workflowruns.plnt.work``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


# The project's two types. The emulator serves them from the CRDs in crds (as
# any CRD applied to it); these constants name them for tests that reach the store.
WORKFLOW_RUNS = ResourceType(
    group="plnt.work",
    version="v1",
    plural="workflowruns",
    kind="WorkflowRun",
    namespaced=True,
    status_subresource=True,
    custom=True,
)
PLNT_BACKENDS = ResourceType(
    group="plnt.work",
    version="v1",
    plural="plntbackends",
    kind="PlntBackend",
    namespaced=False,
    status_subresource=True,
    custom=True,
)
EVENTS = ResourceType(
    group="", version="v1", plural="events", kind="Event", namespaced=True, short_names=("ev",)
)
LEASES = ResourceType(
    group="coordination.k8s.io", version="v1", plural="leases", kind="Lease", namespaced=True
)
NAMESPACES = ResourceType(
    group="",
    version="v1",
    plural="namespaces",
    kind="Namespace",
    namespaced=False,
    short_names=("ns",),
)
CUSTOM_RESOURCE_DEFINITIONS = ResourceType(
    group="apiextensions.k8s.io",
    version="v1",
    plural="customresourcedefinitions",
    kind="CustomResourceDefinition",
    namespaced=False,
    status_subresource=True,
    generation=True,
    short_names=("crd", "crds"),
    categories=("api-extensions",),
)
ALWAYS_SERVED = (NAMESPACES, CUSTOM_RESOURCE_DEFINITIONS)
"""Served by every emulator, whatever ``types`` it is given: a cluster has namespaces, and
custom resources come from CRDs."""
DEFAULT_TYPES = (EVENTS, LEASES)
"""The built-in types served by default, besides ``ALWAYS_SERVED`` and the CRDs' types."""
SERVICES = ResourceType(group="", version="v1", plural="services", kind="Service", namespaced=True)
ENDPOINTS = ResourceType(
    group="", version="v1", plural="endpoints", kind="Endpoints", namespaced=True
)
"""Served on request (``types=``): a test plays the endpoints controller, writing the
ready and not-ready addresses of a Service's pods as the real one does."""
NODES = ResourceType(
    group="",
    version="v1",
    plural="nodes",
    kind="Node",
    namespaced=False,
    status_subresource=True,
    status_on_create=True,
    short_names=("no",),
)
"""Served on request (``types=``): a test plays the kubelets, writing ``status.allocatable``
(what GPU capacity is computed from) and ``spec.unschedulable`` (cordon)."""
PODS = ResourceType(
    group="",
    version="v1",
    plural="pods",
    kind="Pod",
    namespaced=True,
    status_subresource=True,
    short_names=("po",),
    categories=("all",),
)
"""Served on request (``types=``): a test plays the scheduler and kubelet, writing
``spec.nodeName`` on create (a bound pod) and ``status.phase`` through the status
subresource; a created pod starts ``Pending`` as on a real server."""
SECRETS = ResourceType(group="", version="v1", plural="secrets", kind="Secret", namespaced=True)
"""Served on request (``types=``): registry pull secrets the puller reads. Kept as written
(``type``, base64 ``data``); ``stringData`` is not folded into ``data`` as a real server does."""


class ApiError(Exception):
    """A request the server refuses; ``status()`` is the body it sends back."""

    def __init__(
        self, code: int, reason: str, message: str, *, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body

    @classmethod
    def not_found(cls, rtype: ResourceType, name: str) -> "ApiError":
        return cls(
            404,
            "NotFound",
            f'{rtype.qualified} "{name}" not found',
            details={"name": name, "group": rtype.group, "kind": rtype.plural},
        )

    @classmethod
    def conflict(cls, rtype: ResourceType, name: str, why: str) -> "ApiError":
        return cls(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {rtype.qualified} "{name}": {why}',
            details={"name": name, "group": rtype.group, "kind": rtype.plural},
        )

    @classmethod
    def invalid(
        cls,
        rtype: ResourceType,
        name: str,
        why: str,
        *,
        causes: list[dict[str, Any]] | None = None,
    ) -> "ApiError":
        """422 Invalid; kubectl prints only ``details.causes``, so there is always one.

        Without ``causes``, ``why`` of the form ``<field>: <message>`` becomes the cause.
        """
        if causes is None:
            path, _, rest = why.partition(": ")
            field_cause = rest and " " not in path
            causes = [
                {
                    "reason": "FieldValueInvalid",
                    "message": rest if field_cause else why,
                    **({"field": path} if field_cause else {}),
                }
            ]
        return cls(
            422,
            "Invalid",
            f'{rtype.kind}.{rtype.group or "core"} "{name}" is invalid: {why}',
            details={"name": name, "group": rtype.group, "kind": rtype.kind, "causes": causes},
        )

    @classmethod
    def gone(cls, requested: int, oldest: int) -> "ApiError":
        return cls(410, "Expired", f"too old resource version: {requested} ({oldest})")


STALE_OBJECT = (
    "the object has been modified; please apply your changes to the latest version and try again"
)
