"""Registry pull secrets read from the Kubernetes API: ``kubernetes.io/dockerconfigjson``
Secrets that WorkflowRuns name as ``spec.workflow.pullSecret``.

One ``get`` of the Secret per pull, on a worker thread with a request timeout (the
``kubernetes`` client blocks), through the ``ApiClient`` the puller already has for
PlntBackends (``plnt_common.kube.api_client``). Nothing is cached: a rotated Secret counts
from the next pull on. It does not list or watch Secrets, and it reads none but the one a
run names, in the run's own namespace.
"""

import asyncio
import base64
import binascii
import json

from kubernetes import client

from plnt_common.errors import PullSecretInvalid, ResourceNotFound
from plnt_common.kube import REQUEST_TIMEOUT_S
from plnt_common.kube_errors import TRANSPORT_ERRORS, ErrorKinds, api_error
from plnt_common.oci import Logins, logins_of

DOCKER_CONFIG_JSON = "kubernetes.io/dockerconfigjson"
KEY = ".dockerconfigjson"
SECRET_READS = ErrorKinds(
    refused=PullSecretInvalid,
    forbidden_hint="the puller's service account needs get on secrets in the run's namespace",
)
"""Failed Secret reads: refusals are ``PullSecretInvalid``, the rest retryable."""


class KubePullSecrets:
    """Implements ``ports.PullSecrets`` over the Kubernetes API."""

    def __init__(
        self, *, api: client.ApiClient, request_timeout_s: float = REQUEST_TIMEOUT_S
    ) -> None:
        self._core = client.CoreV1Api(api)
        self._timeout = request_timeout_s

    async def logins(self, *, namespace: str, name: str) -> Logins:
        """The logins of Secret ``namespace/name``; raises ``PullSecretInvalid`` naming it
        (missing, another type, no valid ``.dockerconfigjson``, read refused) or
        ``KubernetesUnavailable`` (retryable) when the API server did not answer."""
        shown = f"Secret {namespace}/{name}"
        try:
            secret = await asyncio.to_thread(
                self._core.read_namespaced_secret,
                name,
                namespace,
                _request_timeout=self._timeout,
            )
        except TRANSPORT_ERRORS as exc:
            error = api_error(exc, doing=f"reading pull secret {shown}", kinds=SECRET_READS)
            if isinstance(error, ResourceNotFound):
                raise PullSecretInvalid(
                    f"pull secret {shown} not found (spec.workflow.pullSecret names a "
                    f"{DOCKER_CONFIG_JSON} Secret in the run's namespace)"
                ) from None
            raise error from None
        if secret.type != DOCKER_CONFIG_JSON:
            raise PullSecretInvalid(
                f"pull secret {shown} is of type {secret.type!r}, not {DOCKER_CONFIG_JSON} "
                "(kubectl create secret docker-registry makes one)"
            )
        encoded = (secret.data or {}).get(KEY)
        if not encoded:
            raise PullSecretInvalid(f"pull secret {shown} has no {KEY} key")
        try:
            document = json.loads(base64.b64decode(encoded, validate=True))
            return logins_of(document, source=shown)
        except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
            raise PullSecretInvalid(
                f"pull secret {shown}: {KEY} is not a docker config.json ({exc})"
            ) from None
