"""The project's error hierarchy.

Adapters translate infrastructure errors into these at the boundary (``raise ... from None``)
so handlers decide on retry or failure by type alone.
"""


class PlntError(Exception):
    """Base of every error plnt raises on purpose. ``retryable`` drives NAK versus fail."""

    retryable = False
    reason = "Error"


class SpecInvalid(PlntError, ValueError):
    """The workflow spec or a resource is malformed, cyclic or out of bounds.

    A ``ValueError`` too, so pydantic validators may raise it and keep the field path.
    """

    reason = "SpecInvalid"


class UnknownEventType(SpecInvalid):
    """An event of a type this version does not know: a newer version published it, and
    a consumer leaves it for a newer replica instead of terminating it."""

    reason = "UnknownEventType"


class IntegrityMismatch(PlntError):
    """The fetched spec's digest differs from the pinned ``integrityHash``."""

    reason = "IntegrityMismatch"


class SpecNotFound(PlntError):
    """The registry answered, and the spec object is not there."""

    reason = "SpecNotFound"


class RegistryUnavailable(PlntError):
    """The registry did not answer or failed mid-download: worth another try."""

    retryable = True
    reason = "RegistryUnavailable"


class BackendUnavailable(PlntError):
    """The named PlntBackend does not exist or cannot serve the request."""

    reason = "BackendUnavailable"


class InstallFailed(PlntError):
    """A release did not become ready.

    ``reason`` narrows the default when the backend said why (``CodeInvalid``,
    ``DependenciesFailed``).
    """

    reason = "InstallFailed"

    def __init__(self, *args: object, reason: str | None = None) -> None:
        super().__init__(*args)
        if reason:
            self.reason = reason


class CodeInvalid(PlntError):
    """A workflow's code archive is missing, does not hash to its pinned digest, is not a
    gzip tar, or holds a member that could land outside its directory."""

    reason = "CodeInvalid"


class SignatureMissing(PlntError):
    """The run trusts only signed specs (``verify.publicKeys``) and the spec has no
    signature beside it."""

    reason = "SignatureMissing"


class SignatureInvalid(PlntError):
    """A spec's signature is malformed, by a key the run does not trust, or does not match
    the spec's bytes."""

    reason = "SignatureInvalid"


class PullSecretInvalid(PlntError):
    """The registry pull secret a run names (``spec.workflow.pullSecret``) does not exist,
    is not a ``kubernetes.io/dockerconfigjson`` Secret, cannot be read, or cannot be used
    where the puller runs (no Kubernetes access)."""

    reason = "PullSecretInvalid"


class BackendNotAllowed(PlntError):
    """The PlntBackend a run names refuses it: the run's namespace is outside
    ``allowedNamespaces`` or its workflow's image outside ``allowedImages``."""

    reason = "BackendNotAllowed"


class NoCapacity(InstallFailed):
    """Installing the canary would make plnt's releases hold more GPUs of a gpuClass than
    its declared ``capacity``."""

    reason = "NoCapacity"


class DependenciesFailed(InstallFailed):
    """pip could not install a requirement of a workflow's code."""

    reason = "DependenciesFailed"


class ResourceNotFound(PlntError):
    """A named resource does not exist in the store."""

    reason = "NotFound"


class Conflict(PlntError):
    """A compare-and-set lost against a concurrent writer."""

    retryable = True
    reason = "Conflict"


class BusUnavailable(PlntError):
    """The NATS server cannot be reached."""

    retryable = True
    reason = "BusUnavailable"


class BusMisconfigured(PlntError):
    """The NATS credentials or TLS settings are incomplete or contradict each other."""

    reason = "BusMisconfigured"


class BusFull(PlntError):
    """A stream or bucket refused a write for want of room: its limit is reached or the
    server's disk is full. Retried, since room frees (old events age out, an operator
    raises a limit or frees disk); the message names the store and the setting."""

    retryable = True
    reason = "BusFull"


class KubernetesUnavailable(PlntError):
    """The Kubernetes API server did not answer, or answered with a server-side error."""

    retryable = True
    reason = "KubernetesUnavailable"
