"""OCI registries (``oci://host[:port]/path``): where a workflow version is an OCI artifact,
and a small client of the OCI distribution API that pulls and pushes it.

The artifact of ``name@version`` is ``host[:port]/path/<name>:<tag>`` (the tag is the
version, ``+`` written ``_`` since tags cannot hold ``+``): an OCI image manifest with the
empty config (``application/vnd.oci.empty.v1+json``), ``artifactType`` the workflow media
type, and one layer per published file, each named by its
``org.opencontainers.image.title`` annotation: ``workflow.yaml``
(``WORKFLOW_MEDIA_TYPE``: its digest is the spec's ``integrityHash``), the code archive
(``CODE_MEDIA_TYPE``) and ``workflow.yaml.minisig`` (``SIGNATURE_MEDIA_TYPE``).

Transport: HTTPS, except plain HTTP for loopback hosts and hosts the operator marked
insecure (``PLNT_PULLER_OCI_INSECURE_REGISTRIES``), redirects included. Credentials come
from a docker ``config.json`` (``auths.<host>.auth``, or ``username``/``password``), sent as
basic auth or traded for a bearer token at the realm a ``WWW-Authenticate: Bearer``
challenge names. A pull may bring its own logins (``Logins``, from a run's
``kubernetes.io/dockerconfigjson`` pull secret): for the hosts they list they win over the
file, for that pull only. Connection errors, timeouts, 429 and 5xx answers are retried a bounded
number of times with back-off, then raised as ``RegistryUnavailable``.

Why not a library: the ORAS Python SDK (``oras``) is synchronous over requests, so the
puller would block its event loop or run a second HTTP stack in threads; the part of the
distribution spec plnt needs (a manifest by tag, blobs by digest, monolithic uploads,
basic and token auth) fits in this module over the aiohttp the services already use.
It does not do chunked uploads, cross-repository mounts, credential helpers
(``credsStore``) or manifest lists.
"""

import asyncio
import base64
import hashlib
import ipaddress
import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit

import aiohttp

from plnt_common.errors import RegistryUnavailable, SpecInvalid, SpecNotFound

WORKFLOW_MEDIA_TYPE = "application/vnd.microagents.workflow.v1+yaml"
CODE_MEDIA_TYPE = "application/vnd.microagents.code.v1.tar+gzip"
SIGNATURE_MEDIA_TYPE = "application/vnd.microagents.signature.v1+minisign"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_CONFIG = b"{}"
TITLE = "org.opencontainers.image.title"
MAX_MANIFEST_BYTES = 64 * 1024
MAX_REDIRECTS = 5

HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?$")
REPOSITORY = re.compile(r"^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$")
"""The distribution spec's repository name: lowercase components, no ``..``, no empty ones."""
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class Artifact:
    """Where the artifact of one workflow version lives."""

    host: str
    """``host[:port]`` as written in the registry URL."""
    repository: str
    tag: str

    @property
    def reference(self) -> str:
        return f"{self.host}/{self.repository}:{self.tag}"


def tag_of(version: str) -> str:
    """The tag of a semver ``version``: ``+`` (build metadata) becomes ``_``, as Helm does."""
    return version.replace("+", "_")


def locate(registry: str, *, name: str, version: str) -> Artifact:
    """The artifact of ``name@version`` in ``oci://host[:port][/path]``.

    Raises ``SpecNotFound`` for a URL that is not of that shape or a name or tag the
    distribution spec does not allow (``..``, empty components, uppercase, ``:`` or ``@``
    in a name or version): nothing outside ``path/<name>:<tag>`` can be addressed.
    """
    parts = urlsplit(registry)
    host, path = parts.netloc, parts.path.strip("/")
    if parts.scheme != "oci" or not HOST.match(host) or parts.query or parts.fragment:
        raise SpecNotFound(f"{registry} is not an oci://host[:port]/path registry")
    repository = f"{path}/{name}" if path else name
    if not REPOSITORY.match(repository):
        raise SpecNotFound(
            f"{registry}: {repository!r} is not an OCI repository name "
            "(lowercase components separated by '/', no '..')"
        )
    tag = tag_of(version)
    if not TAG.match(tag):
        raise SpecNotFound(f"{registry}: version {version!r} cannot be an OCI tag")
    return Artifact(host=host, repository=repository, tag=tag)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``), any port."""
    hostname = urlsplit(f"//{host}").hostname or ""
    if hostname == "localhost" or hostname.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


def plain_http_allowed(host: str, *, insecure: Collection[str]) -> bool:
    """Whether ``host[:port]`` may be reached over plain HTTP: a loopback host, or one the
    operator marked insecure (listed as ``host:port`` or as ``host`` for every port)."""
    hostname = urlsplit(f"//{host}").hostname or ""
    return is_loopback(host) or host in insecure or hostname in insecure


def base_url(host: str, *, insecure: Collection[str]) -> str:
    """``http://host`` when plain HTTP is allowed, else ``https://host``."""
    scheme = "http" if plain_http_allowed(host, insecure=insecure) else "https"
    return f"{scheme}://{host}"


def check_transport(url: str, *, insecure: Collection[str]) -> None:
    """Raise ``SpecNotFound`` for a plain-HTTP ``url`` (a redirect target) to a host that
    is neither loopback nor marked insecure."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        return
    if parts.scheme == "http" and plain_http_allowed(parts.netloc, insecure=insecure):
        return
    raise SpecNotFound(
        f"refused {parts.scheme}://{parts.netloc}: plain HTTP only to loopback hosts or "
        "registries marked insecure (PLNT_PULLER_OCI_INSECURE_REGISTRIES)"
    )


# --- credentials --------------------------------------------------------------------------


def docker_config_file(directory: str, *, home: Path) -> Path:
    """The docker ``config.json``: in ``directory`` (``$DOCKER_CONFIG``) when set, else
    ``~/.docker/config.json``."""
    return Path(directory) / "config.json" if directory else home / ".docker" / "config.json"


def credentials_for(host: str, *, config_file: Path) -> tuple[str, str] | None:
    """``(username, password)`` for ``host`` in ``config_file``, None when it has none (or
    the file is absent). Keys match as docker matches them: ``host``, or a URL of it
    (``https://host/v1/``). Raises ``SpecNotFound`` for a file that is not valid."""
    try:
        document = json.loads(config_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SpecNotFound(f"cannot read the docker config {config_file}: {exc}") from None
    auths = document.get("auths") if isinstance(document, dict) else None
    if not isinstance(auths, dict):
        return None
    for key, entry in auths.items():
        if _auth_host(str(key)) != host or not isinstance(entry, dict):
            continue
        try:
            login = _login(str(key), entry)
        except ValueError as exc:
            raise SpecNotFound(f"{config_file}: {exc}") from None
        if login is not None:
            return login
    return None


@dataclass(frozen=True)
class Logins:
    """Registry logins one pull brings along (a run's pull secret): for the hosts listed in
    ``by_host`` they are used instead of the docker config file's."""

    source: str
    """What they came from, for messages, e.g. ``Secret agents/regcred``."""
    by_host: Mapping[str, tuple[str, str]] = field(repr=False)


def logins_of(document: object, *, source: str) -> Logins:
    """The logins of a docker config document (``{"auths": {...}}``, what a
    ``kubernetes.io/dockerconfigjson`` Secret holds), keyed by ``host[:port]``.

    Raises ``ValueError`` naming the entry when the document is not of that shape or an
    entry holds no usable login."""
    auths = document.get("auths") if isinstance(document, dict) else None
    if not isinstance(auths, dict):
        raise ValueError("it has no auths mapping")
    by_host: dict[str, tuple[str, str]] = {}
    for key, entry in auths.items():
        if not isinstance(entry, dict):
            raise ValueError(f"auths.{key} is not a mapping")
        login = _login(str(key), entry)
        if login is None:
            raise ValueError(f"auths.{key} holds neither auth nor username and password")
        by_host[_auth_host(str(key))] = login
    return Logins(source=source, by_host=by_host)


def _login(key: str, entry: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(username, password)`` of one ``auths`` entry, None when it holds neither form;
    raises ``ValueError`` for an ``auth`` that is not base64 of ``user:password``."""
    if entry.get("auth"):
        try:
            decoded = base64.b64decode(str(entry["auth"]), validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            raise ValueError(f"auths.{key}.auth is not base64 of user:password") from None
        user, sep, password = decoded.partition(":")
        if not sep:
            raise ValueError(f"auths.{key}.auth is not user:password")
        return user, password
    if entry.get("username") is not None and entry.get("password") is not None:
        return str(entry["username"]), str(entry["password"])
    return None


def _auth_host(key: str) -> str:
    return urlsplit(key).netloc if "://" in key else key.split("/", 1)[0]


# --- the client ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Blob:
    """A layer as the manifest describes it."""

    media_type: str
    digest: str
    size: int
    title: str | None


@dataclass(frozen=True)
class Manifest:
    """An image manifest's layers (config and annotations are not needed to pull)."""

    layers: tuple[Blob, ...]


class Unauthorized(RegistryUnavailable):
    """The registry wants credentials it was not given, or refused those it was given.
    Retryable: the docker config is read again on every attempt."""


@dataclass
class OciClient:
    """Pulls and pushes artifacts; one aiohttp session per call, tokens kept between them."""

    insecure: Collection[str] = ()
    docker_config: Path | None = None
    """The docker ``config.json`` to read credentials from; None: no credentials."""
    attempts: int = 3
    backoff_s: Sequence[float] = (0.2, 1.0)
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0
    _tokens: dict[tuple[str, str, tuple[str, str] | None], str] = field(
        default_factory=dict, repr=False
    )
    """Bearer tokens by host, scope and the pull's own login (None: the file's, or none),
    so a token one run's pull secret earned never serves a run without it."""

    async def manifest(
        self, artifact: Artifact, *, logins: Logins | None = None
    ) -> Manifest | None:
        """The artifact's manifest, None when the registry has no such repository or tag.
        ``logins``: this pull's own credentials, over the docker config's.

        Raises ``SpecNotFound`` for a manifest that is not an image manifest, or a refusal;
        ``RegistryUnavailable`` (``Unauthorized`` too) once retries are spent."""
        status, body, _ = await self._call(
            artifact,
            "GET",
            f"/v2/{artifact.repository}/manifests/{artifact.tag}",
            headers={"Accept": MANIFEST_MEDIA_TYPE},
            max_bytes=MAX_MANIFEST_BYTES,
            push=False,
            logins=logins,
        )
        if status == 404:
            return None
        _expect(artifact, status, body, 200)
        return _parse_manifest(artifact, body)

    async def blob(
        self, artifact: Artifact, layer: Blob, *, max_bytes: int, logins: Logins | None = None
    ) -> bytes:
        """The layer's bytes, checked against its digest; raises ``SpecInvalid`` when the
        layer is over ``max_bytes``, ``SpecNotFound`` when it is missing. ``logins`` as for
        ``manifest``."""
        if layer.size > max_bytes:
            raise SpecInvalid(_too_big(artifact, layer, layer.size, max_bytes))
        status, body, _ = await self._call(
            artifact,
            "GET",
            f"/v2/{artifact.repository}/blobs/{layer.digest}",
            max_bytes=max_bytes,
            push=False,
            logins=logins,
        )
        if status == 404:
            raise SpecNotFound(f"{artifact.reference}: layer {layer.digest} is missing")
        _expect(artifact, status, body, 200)
        if len(body) > max_bytes:
            raise SpecInvalid(_too_big(artifact, layer, len(body), max_bytes))
        if digest_of(body) != layer.digest:
            raise RegistryUnavailable(
                f"{artifact.reference}: the bytes of layer {layer.digest} do not match its digest"
            )
        return body

    async def push_blob(self, artifact: Artifact, data: bytes) -> str:
        """Upload ``data`` unless the repository has it; returns its digest."""
        digest = digest_of(data)
        path = f"/v2/{artifact.repository}/blobs/{digest}"
        status, body, _ = await self._call(artifact, "HEAD", path, max_bytes=0, push=True)
        if status == 200:
            return digest
        status, body, headers = await self._call(
            artifact, "POST", f"/v2/{artifact.repository}/blobs/uploads/", max_bytes=4096, push=True
        )
        _expect(artifact, status, body, 202)
        location = headers.get("Location", "")
        if not location:
            raise RegistryUnavailable(f"{artifact.reference}: an upload answered no Location")
        separator = "&" if "?" in location else "?"
        status, body, _ = await self._call(
            artifact,
            "PUT",
            f"{location}{separator}{urlencode({'digest': digest})}",
            data=data,
            headers={"Content-Type": "application/octet-stream"},
            max_bytes=4096,
            push=True,
        )
        _expect(artifact, status, body, 201)
        return digest

    async def push_manifest(self, artifact: Artifact, manifest: bytes) -> None:
        """Put ``manifest`` under the artifact's tag."""
        status, body, _ = await self._call(
            artifact,
            "PUT",
            f"/v2/{artifact.repository}/manifests/{artifact.tag}",
            data=manifest,
            headers={"Content-Type": MANIFEST_MEDIA_TYPE},
            max_bytes=4096,
            push=True,
        )
        _expect(artifact, status, body, 201)

    # --- HTTP ------------------------------------------------------------------------------

    async def _call(
        self,
        artifact: Artifact,
        method: str,
        path: str,
        *,
        max_bytes: int,
        push: bool,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        logins: Logins | None = None,
    ) -> tuple[int, bytes, Mapping[str, str]]:
        """One request with its retries, authentication and redirects: the final status,
        body (at most ``max_bytes`` + 1 bytes) and headers. Raises ``RegistryUnavailable``."""
        scope = f"repository:{artifact.repository}:{'pull,push' if push else 'pull'}"
        root = base_url(artifact.host, insecure=self.insecure)
        url = urljoin(root, path)
        last = ""
        for attempt in range(self.attempts):
            if attempt:
                await asyncio.sleep(self.backoff_s[min(attempt - 1, len(self.backoff_s) - 1)])
            try:
                status, body, answer = await self._authenticated(
                    artifact, method, url, scope, data, headers, max_bytes, logins
                )
            except (aiohttp.ClientError, TimeoutError) as exc:
                last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                continue
            if status == 429 or status >= 500:
                last = f"HTTP {status}"
                continue
            return status, body, answer
        raise RegistryUnavailable(
            f"registry {artifact.host} did not answer for {artifact.reference} after "
            f"{self.attempts} attempts ({last})"
        )

    async def _authenticated(
        self,
        artifact: Artifact,
        method: str,
        url: str,
        scope: str,
        data: bytes | None,
        headers: Mapping[str, str] | None,
        max_bytes: int,
        logins: Logins | None,
    ) -> tuple[int, bytes, Mapping[str, str]]:
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.connect_timeout_s, sock_read=self.read_timeout_s
        )
        own = logins.by_host.get(artifact.host) if logins is not None else None
        async with aiohttp.ClientSession(timeout=timeout) as http:
            auth = self._tokens.get((artifact.host, scope, own))
            status, body, answer = await self._send(
                http, method, url, data, headers, auth, max_bytes, artifact.host
            )
            if status != 401:
                return status, body, answer
            auth = await self._authorize(http, artifact, scope, answer, logins, own)
            status, body, answer = await self._send(
                http, method, url, data, headers, auth, max_bytes, artifact.host
            )
            if status == 401:
                where = logins.source if own is not None and logins else self.docker_config
                raise Unauthorized(
                    f"registry {artifact.host} refused the credentials for {artifact.host} "
                    f"in {where} (401 Unauthorized) for {artifact.reference}"
                )
            return status, body, answer

    async def _send(
        self,
        http: aiohttp.ClientSession,
        method: str,
        url: str,
        data: bytes | None,
        headers: Mapping[str, str] | None,
        auth: str | None,
        max_bytes: int,
        host: str,
    ) -> tuple[int, bytes, Mapping[str, str]]:
        """Follows redirects itself: each hop's transport is checked, and the registry's
        credentials go to the registry's host only."""
        for _ in range(MAX_REDIRECTS + 1):
            check_transport(url, insecure=self.insecure)
            sent = dict(headers or {})
            if auth is not None and urlsplit(url).netloc == host:
                sent["Authorization"] = auth
            async with http.request(
                method, url, data=data, headers=sent, allow_redirects=False
            ) as response:
                if response.status in (301, 302, 303, 307, 308) and "Location" in response.headers:
                    url = urljoin(url, response.headers["Location"])
                    if response.status == 303:
                        method, data = "GET", None
                    continue
                body = await _read_bounded(response, max_bytes) if max_bytes else b""
                return response.status, body, dict(response.headers)
        raise SpecNotFound(f"{url}: more than {MAX_REDIRECTS} redirects")

    async def _authorize(
        self,
        http: aiohttp.ClientSession,
        artifact: Artifact,
        scope: str,
        answer: Mapping[str, str],
        logins: Logins | None,
        own: tuple[str, str] | None,
    ) -> str:
        """The Authorization header a 401's challenge asks for, with the pull's own login
        (``own``, from ``logins``) or else the docker config's; raises ``Unauthorized``."""
        challenge = answer.get("WWW-Authenticate", "")
        credentials = own
        if credentials is None and self.docker_config is not None:
            credentials = credentials_for(artifact.host, config_file=self.docker_config)
        where = (
            f"no credentials for {artifact.host} in {self.docker_config}"
            if self.docker_config is not None
            else "no docker config to read credentials from"
        )
        if logins is not None:
            where = f"no credentials for {artifact.host} in {logins.source}" + (
                f" nor in {self.docker_config}" if self.docker_config is not None else ""
            )
        scheme, params = parse_challenge(challenge)
        if scheme == "basic":
            if credentials is None:
                raise Unauthorized(
                    f"registry {artifact.host} answered 401 Unauthorized for "
                    f"{artifact.reference}: {where}"
                )
            return _basic(credentials)
        if scheme != "bearer" or "realm" not in params:
            raise Unauthorized(
                f"registry {artifact.host} answered 401 with an authentication challenge "
                f"plnt does not know: {challenge!r}"
            )
        query = {"scope": scope}
        if "service" in params:
            query["service"] = params["service"]
        realm = params["realm"]
        check_transport(realm, insecure=self.insecure)
        sent = {"Authorization": _basic(credentials)} if credentials is not None else {}
        separator = "&" if "?" in realm else "?"
        async with http.get(
            f"{realm}{separator}{urlencode(query)}", headers=sent, allow_redirects=False
        ) as response:
            body = await _read_bounded(response, MAX_MANIFEST_BYTES)
            if response.status in (401, 403):
                raise Unauthorized(
                    f"the token service of {artifact.host} refused {artifact.reference} "
                    f"({response.status}): "
                    + (where if credentials is None else "the credentials were refused")
                )
            if response.status != 200:
                raise RegistryUnavailable(
                    f"the token service of {artifact.host} answered {response.status}"
                )
        try:
            token = json.loads(body)
            value = str(token.get("token") or token["access_token"])
        except (ValueError, KeyError, AttributeError):
            raise RegistryUnavailable(
                f"the token service of {artifact.host} answered no token"
            ) from None
        auth = f"Bearer {value}"
        self._tokens[(artifact.host, scope, own)] = auth
        return auth


async def _read_bounded(response: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    """The body, or its first ``max_bytes`` + 1 bytes: enough to tell it is over the bound."""
    chunks: list[bytes] = []
    remaining = max_bytes + 1
    while remaining > 0:
        chunk = await response.content.read(remaining)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``('bearer', {'realm': ..., 'service': ..., 'scope': ...})`` of a
    ``WWW-Authenticate`` header; the scheme in lowercase."""
    scheme, _, rest = header.strip().partition(" ")
    params = {
        key.lower(): value for key, value in re.findall(r'([A-Za-z_]+)\s*=\s*"([^"]*)"', rest)
    }
    return scheme.lower(), params


def digest_of(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def descriptor(media_type: str, data: bytes, *, title: str | None = None) -> dict[str, Any]:
    """The OCI descriptor of ``data``."""
    described: dict[str, Any] = {
        "mediaType": media_type,
        "digest": digest_of(data),
        "size": len(data),
    }
    if title is not None:
        described["annotations"] = {TITLE: title}
    return described


def image_manifest(layers: Sequence[Mapping[str, Any]]) -> bytes:
    """The manifest of a workflow artifact with ``layers`` (canonical JSON bytes)."""
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": WORKFLOW_MEDIA_TYPE,
        "config": descriptor(EMPTY_MEDIA_TYPE, EMPTY_CONFIG),
        "layers": list(layers),
    }
    return json.dumps(manifest, separators=(",", ":"), sort_keys=True).encode()


def _basic(credentials: tuple[str, str]) -> str:
    user, password = credentials
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _parse_manifest(artifact: Artifact, body: bytes) -> Manifest:
    if len(body) > MAX_MANIFEST_BYTES:
        raise SpecNotFound(f"{artifact.reference}: the manifest is over {MAX_MANIFEST_BYTES} bytes")
    try:
        document = json.loads(body)
        if document.get("mediaType", MANIFEST_MEDIA_TYPE) != MANIFEST_MEDIA_TYPE:
            raise ValueError(f"media type {document.get('mediaType')}")
        layers = tuple(
            Blob(
                media_type=str(layer["mediaType"]),
                digest=str(layer["digest"]),
                size=int(layer["size"]),
                title=(layer.get("annotations") or {}).get(TITLE),
            )
            for layer in document["layers"]
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SpecNotFound(
            f"{artifact.reference} is not an OCI image manifest of a workflow ({exc})"
        ) from None
    for layer in layers:
        if not DIGEST.match(layer.digest):
            raise SpecNotFound(f"{artifact.reference}: layer digest {layer.digest!r} is not sha256")
    return Manifest(layers=layers)


def _expect(artifact: Artifact, status: int, body: bytes, wanted: int) -> None:
    if status == wanted:
        return
    detail = _registry_message(body)
    if status == 403:
        raise SpecNotFound(
            f"registry {artifact.host} denied access to {artifact.reference} (403){detail}: "
            "the credentials may not read or write it"
        )
    raise SpecNotFound(
        f"registry {artifact.host} answered {status} for {artifact.reference}{detail}"
    )


def _registry_message(body: bytes) -> str:
    try:
        errors = json.loads(body)["errors"]
        return ": " + "; ".join(f"{e.get('code')} {e.get('message')}" for e in errors)
    except (ValueError, KeyError, TypeError, AttributeError):
        return ""


def _too_big(artifact: Artifact, layer: Blob, size: int, bound: int) -> str:
    name = layer.title or layer.digest
    return f"{artifact.reference}: layer {name} is {size} bytes, over the {bound}-byte bound"
