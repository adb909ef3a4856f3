"""Credentials of kubernetes PlntBackends: a Helm CLI and an API client per target cluster.

``inCluster: true`` means the installer's own cluster, reached with its own credentials
resolved the standard way (``KUBECONFIG`` or ``~/.kube/config``, else the pod's service
account); Helm gets no ``--kubeconfig`` and resolves the same way. ``kubeconfigSecretRef``
is read with those own credentials, written to a private file (mode 0600) that Helm gets
as ``--kubeconfig`` and the API client loads. The Secret is read again at every connect,
so a rotated kubeconfig is picked up; a referenced Secret without a namespace is looked
up in the installer's own namespace.

It connects; it does not decide what to do on the cluster.
"""

import asyncio
import base64
import hashlib
import json
import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from plnt_common.errors import BackendUnavailable
from plnt_common.kube_errors import TRANSPORT_ERRORS, api_error
from plnt_common.logs import get_logger
from plnt_common.resources import KubernetesTarget
from plnt_installer.adapters.helm_cli import HelmCli
from plnt_installer.adapters.kube_errors import INSTALLER_ERRORS
from plnt_installer.adapters.kube_readiness import REQUEST_TIMEOUT_S, KubeDeployments

log = get_logger(__name__)

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_NAMESPACE = "default"
_BAD_KUBECONFIG = (ConfigException, yaml.YAMLError, TypeError, ValueError, KeyError, AttributeError)
"""What loading a malformed kubeconfig raises: the client parses it with few checks."""


@dataclass(frozen=True)
class Connection:
    """What the Helm backend acts through on one target."""

    namespace: str
    """The PlntBackend's ``kubernetes.namespace``: where its releases live."""
    helm: HelmCli
    deployments: KubeDeployments
    api: client.ApiClient | None = None
    """The target's API client: what the capacity observer lists nodes and pods with."""


@dataclass
class _Cluster:
    helm: HelmCli
    api: client.ApiClient
    deployments: KubeDeployments
    digest: str = ""
    """sha256 of the kubeconfig it was built from ("" for the installer's own)."""
    kubeconfig: Path | None = None


class KubeConnector:
    """Builds and caches one ``Connection`` per distinct set of credentials."""

    def __init__(
        self,
        *,
        helm_executable: str = "helm",
        secrets_namespace: str | None = None,
        temp_dir: Path | None = None,
    ) -> None:
        self._helm_executable = helm_executable
        self._secrets_namespace = secrets_namespace or _own_namespace()
        # Kubeconfigs go into a directory of our own (mode 0700), removed at close() and,
        # should the process end without it, at interpreter exit.
        self._temp_dir = Path(tempfile.mkdtemp(prefix="plnt-kubeconfigs-", dir=temp_dir))
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._temp_dir, True)
        self._own: _Cluster | None = None
        self._remote: dict[tuple[str, str, str], _Cluster] = {}
        self._retired: list[_Cluster] = []
        self._lock = asyncio.Lock()

    async def connect(self, *, backend_name: str, target: KubernetesTarget) -> Connection:
        """The connection for ``target``.

        Raises ``BackendUnavailable`` when credentials are missing or unusable (no
        kubeconfig, Secret or key absent, not a kubeconfig) and ``KubernetesUnavailable``
        (retryable) when the API does not answer.
        """
        async with self._lock:
            if target.kubeconfig_secret_ref is None:
                cluster = await self._own_cluster()
            else:
                cluster = await self._remote_cluster(backend_name, target)
        return Connection(
            namespace=target.namespace,
            helm=cluster.helm,
            deployments=cluster.deployments,
            api=cluster.api,
        )

    async def close(self) -> None:
        """Close API clients and delete every kubeconfig file written."""
        async with self._lock:
            clusters = [*self._remote.values(), *self._retired]
            if self._own is not None:
                clusters.append(self._own)
            self._remote.clear()
            self._retired.clear()
            self._own = None
        for cluster in clusters:
            await asyncio.to_thread(_dispose, cluster)
        self._cleanup()

    # --- helpers --------------------------------------------------------------------

    async def _own_cluster(self) -> _Cluster:
        if self._own is None:
            api = await asyncio.to_thread(_own_api_client)
            self._own = _Cluster(
                helm=HelmCli(executable=self._helm_executable),
                api=api,
                deployments=KubeDeployments(api=api),
            )
        return self._own

    async def _remote_cluster(self, backend_name: str, target: KubernetesTarget) -> _Cluster:
        ref = target.kubeconfig_secret_ref
        assert ref is not None
        namespace = ref.namespace or self._secrets_namespace
        kubeconfig = await self._read_secret(backend_name, namespace, ref.name, ref.key)
        digest = hashlib.sha256(kubeconfig).hexdigest()
        key = (namespace, ref.name, ref.key)
        cached = self._remote.get(key)
        if cached is not None and cached.digest == digest:
            return cached
        path = await asyncio.to_thread(_write_private, kubeconfig, backend_name, self._temp_dir)
        try:
            api = await asyncio.to_thread(_api_client_from, path)
        except _BAD_KUBECONFIG as exc:
            await asyncio.to_thread(path.unlink, missing_ok=True)
            raise BackendUnavailable(
                f"PlntBackend {backend_name!r}: Secret {namespace}/{ref.name} key {ref.key!r} "
                f"is not a usable kubeconfig: {exc}"
            ) from None
        cluster = _Cluster(
            helm=HelmCli(executable=self._helm_executable, kubeconfig=path),
            api=api,
            deployments=KubeDeployments(api=api),
            digest=digest,
            kubeconfig=path,
        )
        if cached is not None:
            # A command of another handler may still be using the old file: keep it to close().
            self._retired.append(cached)
            log.info("kubeconfig.rotated", backend=backend_name, secret=f"{namespace}/{ref.name}")
        self._remote[key] = cluster
        return cluster

    async def _read_secret(self, backend_name: str, namespace: str, name: str, key: str) -> bytes:
        own = await self._own_cluster()
        core = client.CoreV1Api(own.api)
        doing = f"PlntBackend {backend_name!r}: reading Secret {namespace}/{name}"
        try:
            response = await asyncio.to_thread(
                core.read_namespaced_secret,
                name,
                namespace,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT_S,
            )
        except ApiException as exc:
            if exc.status == 404:
                raise BackendUnavailable(f"{doing}: not found") from None
            raise api_error(exc, doing=doing, kinds=INSTALLER_ERRORS) from None
        except TRANSPORT_ERRORS as exc:
            raise api_error(exc, doing=doing, kinds=INSTALLER_ERRORS) from None
        try:
            body: Any = response.data  # raw bytes: _preload_content=False
            data: dict[str, Any] = json.loads(body).get("data") or {}
            encoded = data[key]
            return base64.b64decode(encoded, validate=True)
        except KeyError:
            raise BackendUnavailable(f"{doing}: it has no key {key!r}") from None
        except (ValueError, TypeError, AttributeError):
            raise BackendUnavailable(f"{doing}: key {key!r} is not readable") from None


def _own_api_client() -> client.ApiClient:
    """The installer's own credentials: a kubeconfig if there is one, else in-cluster."""
    configuration = client.Configuration()
    try:
        try:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        except ConfigException:
            config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
    except ConfigException as exc:
        raise BackendUnavailable(
            f"the installer has no Kubernetes credentials (KUBECONFIG, ~/.kube/config or "
            f"a service account): {exc}"
        ) from None
    return client.ApiClient(configuration)


def _api_client_from(path: Path) -> client.ApiClient:
    api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(path)
    )
    return api


def _write_private(content: bytes, backend_name: str, directory: Path) -> Path:
    """Write ``content`` to a new file only this user may read (mkstemp creates it 0600)."""
    fd, name = tempfile.mkstemp(prefix=f"plnt-{backend_name}-", suffix=".kubeconfig", dir=directory)
    try:
        os.fchmod(fd, 0o600)  # explicit: the file holds cluster credentials
        os.write(fd, content)
    finally:
        os.close(fd)
    return Path(name)


def _own_namespace() -> str:
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or DEFAULT_NAMESPACE
    except OSError:
        return DEFAULT_NAMESPACE


def _dispose(cluster: _Cluster) -> None:
    cluster.api.close()  # type: ignore[no-untyped-call]
    if cluster.kubeconfig is not None:
        cluster.kubeconfig.unlink(missing_ok=True)
