"""PlntBackends read from the Kubernetes API: the puller's catalog, the installer's targets,
and the puller service resolving a run's backend that exists only in the API.

Everything goes through the real ``kubernetes`` client to the API emulator over HTTP; the
puller runs as ``app.run`` against the per-test nats-server. Nothing is mocked.
"""

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from kube_support import BACKENDS, GROUP, VERSION
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.config import kube_config
from stack_support import example_workflow, publish_spec

from plnt_common import subjects
from plnt_common.backend_catalog import KubernetesOnly, StoredBackends
from plnt_common.bus.bus import Bus
from plnt_common.bus.history import read_events
from plnt_common.errors import BackendUnavailable, KubernetesUnavailable, PlntError
from plnt_common.events import (
    Envelope,
    EventType,
    RunFailed,
    RunSnapshot,
    SpecPulled,
)
from plnt_common.kube import BACKEND_READS, PlntBackendReader, api_client
from plnt_common.kube_errors import api_error
from plnt_common.resources import PlntBackendSpec, WorkflowRunSpec
from plnt_common.status import Reason
from plnt_installer import app as installer_app
from plnt_installer.settings import InstallerSettings
from plnt_puller import app
from plnt_puller.settings import PullerSettings
from plnt_testkit.events import run_requested
from plnt_testkit.kube_emulator import EVENTS, KubeEmulator

H100 = "nvidia.com/h100"
LOCAL_SPEC: dict[str, Any] = {
    "type": "local",
    "gpuClasses": {H100: {"resourceName": "nvidia.com/gpu", "capacity": 8}},
}
CLUSTER_SPEC: dict[str, Any] = {
    "type": "kubernetes",
    "kubernetes": {"inCluster": True, "namespace": "agents"},
    "gpuClasses": {H100: {"resourceName": "nvidia.com/gpu", "capacity": 16}},
    "llm": {"baseUrl": "https://api.openai.com/v1", "model": "gpt-4o-mini"},
}
INVALID_SPEC: dict[str, Any] = {"type": "kubernetes"}  # no spec.kubernetes
"""What the CRD's CEL rule rejects; stored while an older CRD without that rule served
(``create_under_an_older_crd``), as a cluster keeps objects its CRD now refuses."""
CRDS = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")
SPEC_RULES = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/x-kubernetes-validations"


def create_backend(objects: client.CustomObjectsApi, name: str, spec: dict[str, Any]) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PlntBackend",
        "metadata": {"name": name},
        "spec": spec,
    }
    objects.create_cluster_custom_object(GROUP, VERSION, BACKENDS, body)


def create_under_an_older_crd(
    objects: client.CustomObjectsApi, name: str, spec: dict[str, Any]
) -> None:
    """Create a backend while the CRD lacks its spec rules (an older CRD), then bring the
    current CRD back: the object stays stored, as on a real cluster."""
    crd = objects.get_cluster_custom_object(*CRDS, f"{BACKENDS}.{GROUP}")
    rules = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "x-kubernetes-validations"
    ]
    objects.patch_cluster_custom_object(
        *CRDS,
        f"{BACKENDS}.{GROUP}",
        [{"op": "remove", "path": SPEC_RULES}],
        _content_type="application/json-patch+json",
    )
    try:
        create_backend(objects, name, spec)
    finally:
        objects.patch_cluster_custom_object(
            *CRDS,
            f"{BACKENDS}.{GROUP}",
            [{"op": "add", "path": SPEC_RULES, "value": rules}],
            _content_type="application/json-patch+json",
        )


async def in_thread(function: Callable[..., Any], *args: Any) -> Any:
    """A blocking client call from an async test, off the loop the services run on."""
    return await asyncio.to_thread(function, *args)


@pytest.fixture
async def reader(kubeconfig: Path) -> AsyncIterator[PlntBackendReader]:
    reader = PlntBackendReader(
        api=api_client(kubeconfig=str(kubeconfig), user_agent="test"), request_timeout_s=5
    )
    yield reader
    await reader.close()


# --- the puller's catalog -------------------------------------------------------------------


async def test_a_backend_created_through_the_api_is_what_the_puller_catalog_returns(
    objects: client.CustomObjectsApi, reader: PlntBackendReader
) -> None:
    await in_thread(create_backend, objects, "gpu-cluster-01", CLUSTER_SPEC)

    found = await reader.get("gpu-cluster-01")

    assert found == PlntBackendSpec.model_validate(CLUSTER_SPEC)


async def test_a_backend_the_api_does_not_have_is_none(reader: PlntBackendReader) -> None:
    assert await reader.get("nowhere") is None


async def test_an_invalid_backend_is_unavailable_with_a_message_naming_the_field(
    objects: client.CustomObjectsApi, reader: PlntBackendReader
) -> None:
    await in_thread(create_under_an_older_crd, objects, "odd", INVALID_SPEC)

    with pytest.raises(BackendUnavailable, match="PlntBackend 'odd' has an invalid spec") as err:
        await reader.get("odd")

    assert "spec.kubernetes" in str(err.value)
    assert not err.value.retryable


# --- the installer's targets ----------------------------------------------------------------


async def test_installer_targets_are_the_valid_kubernetes_backends_only(
    objects: client.CustomObjectsApi, reader: PlntBackendReader
) -> None:
    await in_thread(create_backend, objects, "gpu-cluster-01", CLUSTER_SPEC)
    await in_thread(create_backend, objects, "laptop", LOCAL_SPEC)
    await in_thread(create_under_an_older_crd, objects, "odd", INVALID_SPEC)

    targets = await KubernetesOnly(reader).all()

    assert targets == {"gpu-cluster-01": PlntBackendSpec.model_validate(CLUSTER_SPEC)}
    assert set(await reader.all()) == {"gpu-cluster-01", "laptop"}  # "odd" skipped, not fatal


async def test_installer_lists_targets_from_the_api_when_its_settings_say_kubernetes(
    nats_url: str,
    kubeconfig: Path,
    objects: client.CustomObjectsApi,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await in_thread(create_backend, objects, "gpu-cluster-01", CLUSTER_SPEC)
    monkeypatch.setenv("PLNT_INSTALLER_KUBECONFIG", str(kubeconfig))
    bus = await Bus.open(nats_url, service="test")
    try:
        embedded = installer_app.build_targets(bus, InstallerSettings(nats_url=nats_url))
        assert isinstance(embedded, KubernetesOnly)
        assert isinstance(embedded.catalog, StoredBackends)
        monkeypatch.setenv("PLNT_INSTALLER_BACKENDS", "kubernetes")
        targets = installer_app.build_targets(bus, InstallerSettings(nats_url=nats_url))
        assert isinstance(targets, KubernetesOnly)
        assert isinstance(targets.catalog, PlntBackendReader)
        assert list(await targets.all()) == ["gpu-cluster-01"]
    finally:
        await bus.close()


async def test_no_backends_at_all_is_an_empty_catalog(reader: PlntBackendReader) -> None:
    assert await KubernetesOnly(reader).all() == {}


async def test_a_cluster_without_the_crd_says_to_install_it(tmp_path: Path) -> None:
    with KubeEmulator(types=(EVENTS,), crds=()) as bare:
        api = api_client(kubeconfig=str(bare.write_kubeconfig(tmp_path / "bare")), user_agent="t")
        reader = PlntBackendReader(api=api, request_timeout_s=5)
        try:
            with pytest.raises(BackendUnavailable, match="is the CRD installed"):
                await KubernetesOnly(reader).all()
        finally:
            await reader.close()


# --- the API not answering ------------------------------------------------------------------


async def test_a_stopped_api_server_is_a_retryable_error_for_both_adapters(
    emulator: KubeEmulator, reader: PlntBackendReader
) -> None:
    emulator.stop()

    with pytest.raises(KubernetesUnavailable, match="reading PlntBackend 'gpu-cluster-01'") as e:
        await reader.get("gpu-cluster-01")
    assert e.value.retryable
    with pytest.raises(KubernetesUnavailable, match=r"listing plntbackends\.plnt\.work") as e:
        await KubernetesOnly(reader).all()
    assert e.value.retryable


async def test_a_server_error_is_retryable_and_the_next_read_succeeds(
    emulator: KubeEmulator, objects: client.CustomObjectsApi, reader: PlntBackendReader
) -> None:
    await in_thread(create_backend, objects, "gpu-cluster-01", CLUSTER_SPEC)

    def crash() -> None:
        raise RuntimeError("the API server broke")  # the server answers 500

    emulator.before("GET", "/plntbackends/gpu-cluster-01", crash)
    with pytest.raises(KubernetesUnavailable, match="answered 500") as err:
        await reader.get("gpu-cluster-01")
    assert err.value.retryable

    assert await reader.get("gpu-cluster-01") is not None


def _status(code: int, message: str) -> str:
    return json.dumps({"kind": "Status", "code": code, "message": message})


@pytest.mark.parametrize(
    ("error", "expected", "retryable", "text"),
    [
        (
            ApiException(status=403, reason="Forbidden", body=_status(403, "cannot list")),
            BackendUnavailable,
            False,
            "refused (403): cannot list (the service account needs get and list",
        ),
        (ApiException(status=401, reason="Unauthorized"), BackendUnavailable, False, "(401)"),
        (ApiException(status=422, reason="Invalid"), BackendUnavailable, False, "(422)"),
        (ApiException(status=410, reason="Expired"), KubernetesUnavailable, True, "410"),
        (ApiException(status=429, reason="Too Many"), KubernetesUnavailable, True, "429"),
        (ApiException(status=503, reason="Unavailable"), KubernetesUnavailable, True, "503"),
        (ConnectionRefusedError(111, "refused"), KubernetesUnavailable, True, "did not answer"),
    ],
    ids=[
        "forbidden",
        "unauthorized",
        "invalid",
        "list-expired",
        "throttled",
        "server-error",
        "no-connection",
    ],
)
def test_client_failures_become_project_errors_retryable_only_when_waiting_helps(
    error: BaseException, expected: type[PlntError], retryable: bool, text: str
) -> None:
    translated = api_error(error, doing="reading PlntBackend 'x'", kinds=BACKEND_READS)

    assert type(translated) is expected
    assert translated.retryable is retryable
    assert str(translated).startswith("reading PlntBackend 'x': ")
    assert text in str(translated)


# --- configuration --------------------------------------------------------------------------


def test_an_explicit_kubeconfig_wins_over_the_standard_location(
    kubeconfig: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "none"))
    api = api_client(kubeconfig=str(kubeconfig), user_agent="plnt-test")
    try:
        listed = client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, BACKENDS)
        assert listed["items"] == []
        assert api.user_agent == "plnt-test"
    finally:
        api.close()


def test_a_missing_kubeconfig_file_is_reported_at_start_up(tmp_path: Path) -> None:
    with pytest.raises(KubernetesUnavailable, match="no usable Kubernetes configuration"):
        api_client(kubeconfig=str(tmp_path / "absent"), user_agent="plnt-test")


# --- the puller service, end to end ---------------------------------------------------------


def run_snapshot(name: str, *, registry: Path, cluster: str) -> RunSnapshot:
    spec = WorkflowRunSpec.model_validate(
        {
            "workflow": {"ref": "review-responder@1.2.0", "registry": registry.as_uri()},
            "backend": {"cluster": cluster, "gpuClass": H100, "gpuCount": 1},
        }
    )
    return RunSnapshot(namespace="default", name=name, uid=f"uid-{name}", generation=1, spec=spec)


async def request(bus: Bus, run: RunSnapshot) -> Envelope:
    """Publish ``run.requested`` as the watcher would."""
    event = run_requested(run)
    await bus.publish(event)
    return event


async def outcome(bus: Bus, requested: Envelope, *, timeout_s: float = 20.0) -> Envelope:
    """The first ``spec.pulled`` or ``run.failed`` of ``requested``'s saga."""
    answers = {EventType.SPEC_PULLED, EventType.RUN_FAILED}
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        async for stored in read_events(bus.nc, filter_subject=f"{subjects.SUBJECT_PREFIX}.>"):
            event = stored.event
            if event and event.sagaid == requested.sagaid and event.event_type in answers:
                return event
        await asyncio.sleep(0.1)
    raise AssertionError(f"no outcome for {requested.sagaid} in {timeout_s}s")


@pytest.fixture
async def puller(
    nats_url: str, kubeconfig: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Bus]:
    """The puller reading PlntBackends from the emulator, configured from the environment
    as the chart configures it; yields the test's own bus."""
    monkeypatch.setenv("PLNT_NATS_URL", nats_url)
    monkeypatch.setenv("PLNT_PULLER_BACKENDS", "kubernetes")
    monkeypatch.setenv("PLNT_PULLER_KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("PLNT_PULLER_RETRY_BACKOFF_S", "[0.1]")
    settings = PullerSettings()
    bus = await Bus.open(nats_url, service="test")
    stop = asyncio.Event()
    task = asyncio.create_task(app.run(settings, stop))
    try:
        yield bus
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=15)
        await bus.close()


async def test_puller_resolves_a_backend_that_exists_only_in_the_kubernetes_api(
    puller: Bus, emulator: KubeEmulator, objects: client.CustomObjectsApi, tmp_path: Path
) -> None:
    registry = tmp_path / "registry"
    digest = publish_spec(registry, example_workflow())
    await in_thread(create_backend, objects, "gpu-cluster-01", CLUSTER_SPEC)

    answer = await outcome(
        puller,
        await request(puller, run_snapshot("a", registry=registry, cluster="gpu-cluster-01")),
    )

    assert answer.event_type is EventType.SPEC_PULLED, answer.data
    pulled = answer.payload()
    assert isinstance(pulled, SpecPulled)
    assert pulled.spec_digest == digest
    assert pulled.backend_name == "gpu-cluster-01"
    assert pulled.backend == PlntBackendSpec.model_validate(CLUSTER_SPEC)
    served = [(s.method, s.path.split("?")[0]) for s in emulator.served()]
    assert ("GET", f"/apis/{GROUP}/{VERSION}/{BACKENDS}/gpu-cluster-01") in served


async def test_puller_fails_a_run_whose_backend_the_kubernetes_api_does_not_have(
    puller: Bus, tmp_path: Path
) -> None:
    registry = tmp_path / "registry"
    publish_spec(registry, example_workflow())

    answer = await outcome(
        puller, await request(puller, run_snapshot("b", registry=registry, cluster="nowhere"))
    )

    assert answer.event_type is EventType.RUN_FAILED, answer.data
    failed = answer.payload()
    assert isinstance(failed, RunFailed)
    assert failed.reason == Reason.BACKEND_UNAVAILABLE
    assert "PlntBackend 'nowhere' not found" in failed.message
