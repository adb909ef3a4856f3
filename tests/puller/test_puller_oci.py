"""``oci://`` registries against a real OCI registry (Debian's ``docker-registry``), once
without and once with basic auth: the spec's layer digest is its ``integrityHash``, the
code archive is a second layer, credentials come from a docker ``config.json``, a 401 or a
registry that is down or silent is retried a bounded number of times and then fails the
run ``RegistryUnavailable`` naming why, names that could leave ``path/<name>:<tag>`` are
refused, and plain HTTP goes only to loopback or insecure-marked hosts.

The contract shared with the file and S3 adapters (fetch, missing, size bounds, code,
signatures) runs on OCI too: the ``source`` fixture includes it.
"""

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp import web
from puller_support import (
    VERSION,
    WORKFLOW,
    OciSource,
    PullerUnderTest,
    run_snapshot,
    workflow_yaml,
)
from test_puller_code import ARCHIVE, spec_with_code

from plnt_common.code_archive import archive_digest
from plnt_common.errors import RegistryUnavailable, SpecNotFound
from plnt_common.events import EventType, RunFailed, SpecPulled
from plnt_common.nats_server import free_port
from plnt_common.oci import (
    CODE_MEDIA_TYPE,
    WORKFLOW_MEDIA_TYPE,
    OciClient,
    Unauthorized,
    base_url,
    check_transport,
    credentials_for,
    docker_config_file,
    locate,
    plain_http_allowed,
)
from plnt_common.status import Reason
from plnt_common.workflow import spec_digest
from plnt_puller.adapters.oci_registry import OciRegistry
from plnt_puller.settings import PullerSettings
from plnt_testkit.code_archives import code_archive
from plnt_testkit.oci_registry import (
    MISSING,
    REGISTRY_BINARY,
    OciRegistryServer,
    oci_registry_server,
)

USER, PASSWORD = "alice", "correct horse"


@pytest.fixture
def auth_registry(tmp_path: Path) -> Iterator[OciRegistryServer]:
    """A real registry that wants basic auth (htpasswd)."""
    if REGISTRY_BINARY is None:
        pytest.skip(MISSING)
    with oci_registry_server(tmp_path / "auth-registry", credentials=(USER, PASSWORD)) as server:
        yield server


def write_docker_config(directory: Path, host: str, user: str, password: str) -> Path:
    """A docker config directory as ``docker login`` leaves it."""
    directory.mkdir(parents=True, exist_ok=True)
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    (directory / "config.json").write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    return directory


def registry(**client: object) -> OciRegistry:
    return OciRegistry(client=OciClient(**client))  # type: ignore[arg-type]


# --- pulling through the real registry --------------------------------------------------


async def test_a_run_pinning_the_spec_layer_digest_is_pulled_with_its_code_layer(
    puller: PullerUnderTest, oci_source: OciSource
) -> None:
    archive = code_archive({"triage/__init__.py": "", "triage/tools.py": "X = 1\n"})
    spec = spec_with_code(archive_digest(archive))
    oci_source.publish(archive, file=ARCHIVE)
    oci_source.publish(spec)
    artifact = locate(oci_source.url, name=WORKFLOW, version=VERSION)
    manifest = await OciClient().manifest(artifact)
    assert manifest is not None
    by_type = {layer.media_type: layer for layer in manifest.layers}
    assert set(by_type) == {WORKFLOW_MEDIA_TYPE, CODE_MEDIA_TYPE}
    pinned = by_type[WORKFLOW_MEDIA_TYPE].digest
    assert pinned == spec_digest(spec)  # the integrityHash a user pins is the layer digest
    assert by_type[CODE_MEDIA_TYPE].digest == archive_digest(archive)

    request = await puller.request(run_snapshot(registry=oci_source.url, integrity_hash=pinned))
    outcome = await puller.outcome(request)

    assert outcome.event_type is EventType.SPEC_PULLED, outcome.data
    pulled = outcome.payload()
    assert isinstance(pulled, SpecPulled) and pulled.spec_digest == pinned
    assert (await puller.bus.specs.get(pinned)).data == spec
    assert (await puller.bus.specs.get(archive_digest(archive))).data == archive


async def test_credentials_from_the_docker_config_reach_a_registry_with_basic_auth(
    auth_registry: OciRegistryServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_docker_config(tmp_path / "docker", auth_registry.host, USER, PASSWORD)
    source = OciSource(host=auth_registry.host, docker_config=config / "config.json")
    source.publish(workflow_yaml())
    # The puller finds the file as docker does: DOCKER_CONFIG names its directory.
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    settings = PullerSettings()
    assert settings.oci_docker_config == str(config)
    file = docker_config_file(settings.oci_docker_config, home=tmp_path / "nohome")

    fetched = await registry(docker_config=file).fetch(
        registry=source.url, name=WORKFLOW, version=VERSION
    )

    assert fetched == workflow_yaml()


async def test_without_credentials_a_401_is_retryable_and_names_the_missing_credentials(
    auth_registry: OciRegistryServer, tmp_path: Path
) -> None:
    empty = write_docker_config(tmp_path / "docker", "elsewhere.example:5000", USER, PASSWORD)
    with pytest.raises(Unauthorized) as caught:
        await registry(docker_config=empty / "config.json").fetch(
            registry=auth_registry.url(), name=WORKFLOW, version=VERSION
        )
    assert caught.value.retryable  # the config is read again on the next delivery
    message = str(caught.value)
    assert "401" in message and f"no credentials for {auth_registry.host}" in message
    assert str(empty / "config.json") in message


async def test_wrong_credentials_are_reported_as_refused(
    auth_registry: OciRegistryServer, tmp_path: Path
) -> None:
    config = write_docker_config(tmp_path / "docker", auth_registry.host, USER, "wrong")
    with pytest.raises(Unauthorized) as caught:
        await registry(docker_config=config / "config.json").fetch(
            registry=auth_registry.url(), name=WORKFLOW, version=VERSION
        )
    assert "refused the credentials" in str(caught.value)


async def test_a_run_without_credentials_fails_registry_unavailable_after_bounded_retries(
    puller: PullerUnderTest, auth_registry: OciRegistryServer, tmp_path: Path
) -> None:
    await puller.stop()
    puller.start(oci_docker_config=str(tmp_path / "no-docker-config"))
    request = await puller.request(run_snapshot(registry=auth_registry.url()))

    outcome = await puller.outcome(request)

    assert outcome.event_type is EventType.RUN_FAILED, outcome.data
    failure = outcome.payload()
    assert isinstance(failure, RunFailed)
    assert failure.reason is Reason.REGISTRY_UNAVAILABLE
    assert f"after {puller.settings.max_attempts} attempts" in failure.message
    assert "401 Unauthorized" in failure.message and auth_registry.host in failure.message


# --- a registry that is down or silent ---------------------------------------------------


@pytest.fixture
async def failing() -> AsyncIterator[tuple[str, list[bytes]]]:
    """A loopback registry that answers every request 503; keeps each request line."""
    requests: list[bytes] = []

    async def unavailable(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        requests.append(head.split(b"\r\n", 1)[0])
        writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(unavailable, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"127.0.0.1:{port}", requests
    finally:
        server.close()


async def test_a_registry_answering_503_is_retried_the_bounded_number_of_times(
    failing: tuple[str, list[bytes]],
) -> None:
    host, requests = failing
    with pytest.raises(RegistryUnavailable) as caught:
        await registry(attempts=3, backoff_s=(0.01,)).fetch(
            registry=f"oci://{host}/specs", name=WORKFLOW, version=VERSION
        )
    manifest = f"GET /v2/specs/{WORKFLOW}/manifests/{VERSION} HTTP/1.1".encode()
    assert requests == [manifest] * 3
    assert f"registry {host} did not answer" in str(caught.value)
    assert "after 3 attempts (HTTP 503)" in str(caught.value)


async def test_a_silent_registry_times_out_and_gives_up_within_its_bound() -> None:
    async def silent(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(30)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    started = time.monotonic()
    try:
        with pytest.raises(RegistryUnavailable) as caught:
            await registry(attempts=2, backoff_s=(0.01,), read_timeout_s=0.3).fetch(
                registry=f"oci://127.0.0.1:{port}/specs", name=WORKFLOW, version=VERSION
            )
    finally:
        server.close()
    assert time.monotonic() - started < 3
    assert "after 2 attempts" in str(caught.value)


async def test_a_run_on_a_registry_that_is_down_fails_registry_unavailable(
    puller: PullerUnderTest,
) -> None:
    dead = f"127.0.0.1:{free_port()}"  # nothing listens: connection refused
    request = await puller.request(run_snapshot(registry=f"oci://{dead}/specs"))

    outcome = await puller.outcome(request)

    assert outcome.event_type is EventType.RUN_FAILED, outcome.data
    failure = outcome.payload()
    assert isinstance(failure, RunFailed)
    assert failure.reason is Reason.REGISTRY_UNAVAILABLE
    assert f"registry {dead} did not answer" in failure.message


async def test_a_missing_tag_fails_the_run_spec_not_found_naming_the_reference(
    puller: PullerUnderTest, oci_source: OciSource
) -> None:
    oci_source.publish(workflow_yaml(), version="1.0.0")
    request = await puller.request(run_snapshot(registry=oci_source.url))

    outcome = await puller.outcome(request)

    failure = outcome.payload()
    assert isinstance(failure, RunFailed) and failure.reason is Reason.SPEC_NOT_FOUND
    assert f"{oci_source.location()} not found" in failure.message


# --- names and transport -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("registry_url", "name", "version"),
    [
        ("oci://r.example/specs/..", WORKFLOW, VERSION),
        ("oci://r.example/specs//x", WORKFLOW, VERSION),
        ("oci://r.example/Specs", WORKFLOW, VERSION),
        ("oci://r.example/specs", "../other", VERSION),
        ("oci://r.example/specs", "a:b", VERSION),
        ("oci://r.example/specs", WORKFLOW, "1.0.0@sha256:00"),
        ("oci://r.example/specs", WORKFLOW, "1.0.0/../../x"),
        ("oci://r.example/specs", WORKFLOW, ":latest"),
        ("oci://user@r.example/specs", WORKFLOW, VERSION),
        ("oci://r.example/specs?x=1", WORKFLOW, VERSION),
    ],
    ids=[
        "dot-dot-path",
        "empty-component",
        "uppercase-path",
        "dot-dot-name",
        "colon-name",
        "digest-injection",
        "slash-version",
        "tag-injection",
        "userinfo",
        "query",
    ],
)
def test_names_that_could_address_another_artifact_are_refused(
    registry_url: str, name: str, version: str
) -> None:
    with pytest.raises(SpecNotFound):
        locate(registry_url, name=name, version=version)


def test_the_artifact_is_path_name_and_version_with_build_metadata_as_underscore() -> None:
    artifact = locate("oci://r.example:5000/team/specs", name=WORKFLOW, version="1.2.0+b.7")
    assert artifact.reference == f"r.example:5000/team/specs/{WORKFLOW}:1.2.0_b.7"
    assert locate("oci://r.example", name="w", version="1.0.0").repository == "w"


@pytest.mark.parametrize(
    ("host", "insecure", "allowed"),
    [
        ("127.0.0.1:5000", (), True),
        ("localhost:5000", (), True),
        ("[::1]:5000", (), True),
        ("127.9.9.9", (), True),
        ("registry.lan:5000", (), False),
        ("10.0.0.5:5000", (), False),
        ("localhost.evil.example", (), False),
        ("registry.lan:5000", ("registry.lan:5000",), True),
        ("registry.lan:5001", ("registry.lan:5000",), False),
        ("registry.lan:5001", ("registry.lan",), True),
    ],
    ids=[
        "loopback-v4",
        "localhost",
        "loopback-v6",
        "loopback-range",
        "lan-host",
        "private-ip",
        "localhost-prefix",
        "marked-insecure",
        "other-port-of-marked",
        "marked-for-every-port",
    ],
)
def test_plain_http_only_to_loopback_or_insecure_marked_hosts(
    host: str, insecure: tuple[str, ...], allowed: bool
) -> None:
    assert plain_http_allowed(host, insecure=insecure) is allowed
    assert base_url(host, insecure=insecure) == f"{'http' if allowed else 'https'}://{host}"
    if allowed:
        check_transport(f"http://{host}/v2/", insecure=insecure)
    else:
        with pytest.raises(SpecNotFound, match="plain HTTP only to loopback"):
            check_transport(f"http://{host}/v2/", insecure=insecure)
    check_transport(f"https://{host}/v2/", insecure=insecure)  # HTTPS always goes


def test_the_insecure_list_is_a_puller_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLNT_PULLER_OCI_INSECURE_REGISTRIES", '["registry.lan:5000"]')
    assert PullerSettings().oci_insecure_registries == ("registry.lan:5000",)


async def test_a_redirect_to_plain_http_on_another_host_is_refused() -> None:
    async def redirect(_: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect("http://registry.lan:5000/v2/stolen")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", redirect)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        with pytest.raises(SpecNotFound, match=r"refused http://registry\.lan:5000"):
            await registry(attempts=1).fetch(
                registry=f"oci://127.0.0.1:{port}/specs", name=WORKFLOW, version=VERSION
            )
    finally:
        await runner.cleanup()


# --- bearer tokens -----------------------------------------------------------------------


async def test_a_bearer_challenge_is_answered_with_a_token_from_its_realm(tmp_path: Path) -> None:
    """The registry's token flow, as Docker Hub, GHCR and Harbor run it: a 401 names the
    realm; the token is asked for with the config's basic credentials and the scope."""
    spec = workflow_yaml()
    digest = spec_digest(spec)
    asked: list[tuple[str, str]] = []

    async def token(request: web.Request) -> web.Response:
        asked.append((request.headers.get("Authorization", ""), request.query.get("scope", "")))
        return web.json_response({"token": "t0k3n"})

    async def v2(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != "Bearer t0k3n":
            realm = f"http://{request.host}/token"
            challenge = f'Bearer realm="{realm}",service="test",scope="x"'
            return web.Response(status=401, headers={"WWW-Authenticate": challenge})
        if "/manifests/" in request.path:
            layer = {"mediaType": WORKFLOW_MEDIA_TYPE, "digest": digest, "size": len(spec)}
            return web.json_response({"schemaVersion": 2, "layers": [layer]})
        return web.Response(body=spec)

    app = web.Application()
    app.router.add_get("/token", token)
    app.router.add_get("/v2/{tail:.*}", v2)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host = f"127.0.0.1:{runner.addresses[0][1]}"
    config = write_docker_config(tmp_path / "docker", host, USER, PASSWORD) / "config.json"
    try:
        fetched = await registry(docker_config=config).fetch(
            registry=f"oci://{host}/specs", name=WORKFLOW, version=VERSION
        )
    finally:
        await runner.cleanup()
    assert fetched == spec
    basic = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    # One token for the manifest and the blob: the second request reuses it.
    assert asked == [(basic, f"repository:specs/{WORKFLOW}:pull")]


@pytest.mark.parametrize(
    "key", ["r.example:5000", "https://r.example:5000", "https://r.example:5000/v1/"]
)
def test_docker_config_keys_match_as_docker_matches_them(tmp_path: Path, key: str) -> None:
    config = write_docker_config(tmp_path, key, USER, PASSWORD) / "config.json"
    assert credentials_for("r.example:5000", config_file=config) == (USER, PASSWORD)
    assert credentials_for("r.example:5001", config_file=config) is None


def test_docker_config_defaults_to_the_home_directory(tmp_path: Path) -> None:
    assert docker_config_file("", home=tmp_path) == tmp_path / ".docker" / "config.json"
    assert docker_config_file("/etc/dc", home=tmp_path) == Path("/etc/dc/config.json")


async def test_a_blob_redirected_to_another_host_gets_no_registry_credentials(
    tmp_path: Path,
) -> None:
    """Registries redirect blob downloads to storage (S3, a CDN): the registry's credentials
    stay with the registry."""
    spec = workflow_yaml()
    digest = spec_digest(spec)
    storage_auth: list[str | None] = []

    async def v2(request: web.Request) -> web.Response:
        if "Authorization" not in request.headers:
            challenge = 'Basic realm="test"'
            return web.Response(status=401, headers={"WWW-Authenticate": challenge})
        if "/manifests/" in request.path:
            layer = {"mediaType": WORKFLOW_MEDIA_TYPE, "digest": digest, "size": len(spec)}
            return web.json_response({"schemaVersion": 2, "layers": [layer]})
        port = request.url.port
        raise web.HTTPTemporaryRedirect(f"http://localhost:{port}/storage/blob")

    async def storage(request: web.Request) -> web.Response:
        storage_auth.append(request.headers.get("Authorization"))
        return web.Response(body=spec)

    app = web.Application()
    app.router.add_get("/v2/{tail:.*}", v2)
    app.router.add_get("/storage/blob", storage)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host = f"127.0.0.1:{runner.addresses[0][1]}"
    config = write_docker_config(tmp_path / "docker", host, USER, PASSWORD) / "config.json"
    try:
        fetched = await registry(docker_config=config).fetch(
            registry=f"oci://{host}/specs", name=WORKFLOW, version=VERSION
        )
    finally:
        await runner.cleanup()
    assert fetched == spec
    assert storage_auth == [None]
