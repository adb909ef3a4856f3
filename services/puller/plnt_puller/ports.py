"""The ports the puller acts through; adapters implement them, ``logic`` never imports them.

Only ``typing.Protocol`` definitions live here. Each method documents what it returns
and which ``plnt_common.errors`` it raises; no port raises an infrastructure exception.
"""

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # a type only: ports import no I/O library
    from plnt_common.oci import Logins

SPEC_FILE = "workflow.yaml"
SIGNATURE_FILE = "workflow.yaml.minisig"
"""The spec's detached minisign signature, beside it in file and S3 registries."""


class Registry(Protocol):
    """Where workflow specs are published: ``<registry>/<name>/<version>/workflow.yaml``,
    with any code archive beside it."""

    async def fetch(
        self,
        *,
        registry: str,
        name: str,
        version: str,
        file: str = SPEC_FILE,
        max_bytes: int | None = None,
        logins: "Logins | None" = None,
    ) -> bytes:
        """The bytes of ``file`` of ``name@version``, at most ``max_bytes`` of them
        (default: ``MAX_SPEC_BYTES``, the bound of a spec). ``logins``: the run's own
        registry credentials (its pull secret); only ``oci://`` registries take them.

        Raises ``SpecNotFound`` when the registry answered and the file is not there (or
        may not be read), ``SpecInvalid`` when it is over the size bound, and
        ``RegistryUnavailable`` (retryable) when the registry did not answer;
        ``PullSecretInvalid`` for ``logins`` the registry cannot take.
        """
        ...

    async def fetch_signature(
        self, *, registry: str, name: str, version: str, logins: "Logins | None" = None
    ) -> bytes | None:
        """The detached minisign signature of ``name@version``'s spec (``SIGNATURE_FILE``
        beside it), None when the registry answered that there is none.

        Raises ``SignatureInvalid`` when it is over ``MAX_SIGNATURE_BYTES``, and
        ``RegistryUnavailable`` (retryable) when the registry did not answer.
        """
        ...


class PullSecrets(Protocol):
    """Registry credentials kept in Kubernetes Secrets of type
    ``kubernetes.io/dockerconfigjson``, which runs name as ``spec.workflow.pullSecret``."""

    async def logins(self, *, namespace: str, name: str) -> "Logins":
        """The logins of Secret ``namespace/name`` (its ``.dockerconfigjson`` auths).

        Raises ``PullSecretInvalid`` naming the Secret when it does not exist, is of
        another type, holds no valid docker config, or may not be read;
        ``KubernetesUnavailable`` (retryable) when the API server did not answer.
        """
        ...


class NamespaceLabels(Protocol):
    """The labels of the namespaces runs live in, for ``PlntBackend.spec.allowedNamespaces``."""

    async def labels(self, *, namespace: str) -> dict[str, str]:
        """The labels of Namespace ``namespace`` (empty when it has none).

        Raises ``BackendNotAllowed`` when the Namespace does not exist or may not be read
        (nothing can show the run is allowed), ``KubernetesUnavailable`` (retryable) when
        the API server did not answer.
        """
        ...


class SpecStore(Protocol):
    """Content-addressed storage of pulled spec bytes (``plnt-specs``)."""

    async def contains(self, *, digest: str) -> bool:
        """True when an object is stored under ``digest`` (so it holds these bytes).

        Raises ``BusUnavailable`` (retryable) when the store did not answer.
        """
        ...

    async def put(self, *, digest: str, data: bytes) -> None:
        """Store ``data`` under ``digest``; raises ``BusUnavailable`` (retryable)."""
        ...
