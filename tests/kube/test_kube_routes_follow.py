"""Routes follow what serves on Kubernetes: the real stack's installer observes each Helm
release's Service and endpoints in the API emulator, and its promoter moves and marks the
route. The test plays Helm (it creates the Service the chart renders) and the endpoints
controller (it writes the ready and not-ready addresses of the release's pods)."""

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from nats.js.errors import KeyDeletedError, KeyNotFoundError
from stack_fixtures import start_stack
from stack_support import Client

from plnt_cli.supervisor import Supervisor
from plnt_common.bus.bus import Bus
from plnt_common.releases import ReleasePhase
from plnt_common.routes import RouteEntry, RouteTarget
from plnt_installer.helm_observer import ServiceState, observation
from plnt_testkit.kube_emulator import DEFAULT_TYPES, ENDPOINTS, SERVICES, KubeEmulator

HELM_NS = "plnt-runners"
RELEASE = "default-shop-g1"
REVISION = "1.0.0-g1"
LABELS = {
    "app.kubernetes.io/part-of": "plnt",
    "app.kubernetes.io/component": "runner",
    "app.kubernetes.io/instance": RELEASE,
    "plnt.work/revision": REVISION,
    "plnt.work/workflowrun": "shop",
}
ANNOTATIONS = {"plnt.work/namespace": "default", "plnt.work/saga-id": "default.shop.1.1"}
SERVICE_URL = f"http://{RELEASE}.{HELM_NS}.svc.cluster.local"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeEmulator, Path]]:
    with KubeEmulator(types=(*DEFAULT_TYPES, SERVICES, ENDPOINTS)) as emulator:
        yield emulator, emulator.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")


@pytest.fixture(scope="module")
def stack(
    cluster: tuple[KubeEmulator, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Supervisor]:
    # The installer reaches the emulator as its own cluster (an inCluster PlntBackend).
    supervisor = start_stack(
        tmp_path_factory.mktemp("stack"),
        env={"KUBECONFIG": str(cluster[1]), "PLNT_INSTALLER_BACKEND_UNREACHABLE_AFTER_S": "1"},
    )
    yield supervisor
    supervisor.stop()


@pytest.fixture
def core(cluster: tuple[KubeEmulator, Path]) -> Iterator[client.CoreV1Api]:
    api = config.new_client_from_config(config_file=str(cluster[1]))
    yield client.CoreV1Api(api)
    api.close()


@pytest.fixture
async def bus(stack: Supervisor) -> AsyncIterator[Bus]:
    opened = await Bus.open(stack.config.nats_url, service="test", wait_for_server=True)
    yield opened
    await opened.close()


def endpoints(*, ready: int, not_ready: int = 0) -> dict[str, Any]:
    """What the endpoints controller writes for the release's pods (labels copied from
    the Service, as it does)."""
    subset: dict[str, Any] = {"ports": [{"name": "http", "port": 8080}]}
    if ready:
        subset["addresses"] = [{"ip": f"10.0.0.{i + 1}"} for i in range(ready)]
    if not_ready:
        subset["notReadyAddresses"] = [{"ip": f"10.0.1.{i + 1}"} for i in range(not_ready)]
    return {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": RELEASE, "namespace": HELM_NS, "labels": LABELS},
        "subsets": [subset],
    }


def service(port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": RELEASE,
            "namespace": HELM_NS,
            "labels": LABELS,
            "annotations": ANNOTATIONS,
        },
        "spec": {"ports": [{"name": "http", "port": port, "targetPort": "http"}]},
    }


async def replace(core: client.CoreV1Api, kind: str, body: dict[str, Any]) -> None:
    """Create ``body``, or replace the object of that name."""
    create = getattr(core, f"create_namespaced_{kind}")
    read = getattr(core, f"read_namespaced_{kind}")
    update = getattr(core, f"replace_namespaced_{kind}")
    try:
        current = await asyncio.to_thread(read, RELEASE, HELM_NS)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        await asyncio.to_thread(create, HELM_NS, body)
        return
    body = {**body, "metadata": {**body["metadata"]}}
    body["metadata"]["resourceVersion"] = current.metadata.resource_version
    await asyncio.to_thread(update, RELEASE, HELM_NS, body)


async def route_until(
    bus: Bus, check: Callable[[RouteTarget], bool], *, timeout_s: float = 15
) -> RouteTarget:
    deadline = time.monotonic() + timeout_s
    target = None
    while time.monotonic() < deadline:
        entry = RouteEntry.model_validate_json((await bus.routes.get("default.shop")).value or b"")
        target = entry.stable
        if target is not None and check(target):
            return target
        await asyncio.sleep(0.1)
    raise AssertionError(f"the route did not get there; last: {target}")


async def test_a_helm_release_route_follows_its_service_address_and_endpoint_readiness(
    bus: Bus, core: client.CoreV1Api
) -> None:
    await _serving(bus, core, ready=2)

    # Every pod loses readiness: the route says so, with the Kubernetes reason.
    await replace(core, "endpoints", endpoints(ready=0, not_ready=2))
    down = await route_until(bus, lambda t: not t.serving)
    assert down.reason == "NoReadyPods"
    assert "has no ready endpoint (2 not ready)" in down.message
    assert down.url == f"{SERVICE_URL}:80"

    # Back, behind a Service on another port: the route moves there and serves.
    await replace(core, "service", service(8080))
    await replace(core, "endpoints", endpoints(ready=1))
    up = await route_until(bus, lambda t: t.serving)
    assert up.url == f"{SERVICE_URL}:8080"

    # The release uninstalled: its observation goes; the route is the saga's business.
    await asyncio.to_thread(
        core.delete_namespaced_service, RELEASE, HELM_NS, _preload_content=False
    )
    deadline = time.monotonic() + 15
    while await _kube_observation(bus) is not None:
        assert time.monotonic() < deadline, "the observation of a removed Service stayed"
        await asyncio.sleep(0.2)
    assert (await route_until(bus, lambda t: True)).url == f"{SERVICE_URL}:8080"


async def test_a_silent_api_whose_runner_does_not_answer_takes_the_route_down_until_it_returns(
    cluster: tuple[KubeEmulator, Path], bus: Bus, core: client.CoreV1Api
) -> None:
    emulator, _ = cluster
    await _serving(bus, core, ready=1)

    # The API stops answering; the runner's cluster address answers nothing here either.
    emulator.stop_listening()
    try:
        down = await route_until(bus, lambda t: not t.serving)
    finally:
        emulator.listen_again()
    assert down.reason == "BackendUnreachable"
    assert "the API of PlntBackend 'gpu-east' has not answered for" in down.message
    assert f"GET {SERVICE_URL}:80/healthz" in down.message

    # The API is back and shows a ready endpoint: the route serves again.
    assert (await route_until(bus, lambda t: t.serving)).reason == ""
    await asyncio.to_thread(
        core.delete_namespaced_service, RELEASE, HELM_NS, _preload_content=False
    )


async def _serving(bus: Bus, core: client.CoreV1Api, *, ready: int) -> None:
    """A release on the in-cluster PlntBackend ``gpu-east`` with ``ready`` ready pods, its
    route as the saga left it (the Service address the canary was installed at), once
    the observer has seen it Ready."""
    await Client(bus).apply(
        {
            "apiVersion": "plnt.work/v1",
            "kind": "PlntBackend",
            "metadata": {"name": "gpu-east"},
            "spec": {"type": "kubernetes", "kubernetes": {"inCluster": True, "namespace": HELM_NS}},
        }
    )
    await replace(core, "service", service(80))
    await replace(core, "endpoints", endpoints(ready=ready))
    stable = RouteTarget(revision=REVISION, url=f"{SERVICE_URL}:80", release=RELEASE)
    entry = RouteEntry(namespace="default", name="shop", stable=stable)
    await bus.routes.put("default.shop", entry.model_dump_json().encode())
    assert (await _first_observation(bus))["phase"] == "Ready"


async def _first_observation(bus: Bus) -> dict[str, Any]:
    deadline = time.monotonic() + 15
    while (observed := await _kube_observation(bus)) is None:
        assert time.monotonic() < deadline, "the Service was never observed"
        await asyncio.sleep(0.2)
    return dict(json.loads(observed))


async def _kube_observation(bus: Bus) -> bytes | None:
    try:
        entry = await bus.releases.get(f"observed-kube.default.{RELEASE}")
    except (KeyNotFoundError, KeyDeletedError):
        return None
    return entry.value or None


@pytest.mark.parametrize(
    ("ready", "not_ready", "phase", "reason"),
    [(1, 0, ReleasePhase.READY, ""), (0, 3, ReleasePhase.STARTING, "NoReadyPods")],
    ids=["ready-endpoint", "no-ready-endpoint"],
)
def test_a_service_is_observed_ready_while_it_has_a_ready_endpoint(
    ready: int, not_ready: int, phase: ReleasePhase, reason: str
) -> None:
    state = ServiceState(
        name=RELEASE,
        namespace=HELM_NS,
        port=80,
        run_namespace="default",
        saga_id="default.shop.1.1",
        revision=REVISION,
        ready=ready,
        not_ready=not_ready,
    )
    record = observation(state, backend="gpu-east")
    assert record is not None
    assert (record.namespace, record.release, record.url) == (
        "default",
        RELEASE,
        f"{SERVICE_URL}:80",
    )
    assert (record.phase, record.reason, record.backend_name) == (phase, reason, "gpu-east")


def test_a_service_without_plnt_annotations_is_not_observed() -> None:
    assert observation(ServiceState(name="other", namespace=HELM_NS, port=80), backend="x") is None
