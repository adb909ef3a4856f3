"""Tenants on one cluster, end to end: the real plnt stack on the Kubernetes API emulator.

WorkflowRuns and the PlntBackend live in the emulator; the puller reads backends and
namespaces' labels from it (``PLNT_PULLER_BACKENDS=kubernetes``). Two namespaces of one
tenant each roll out a ``review-responder``: both Ready, both releases present, each
route serving its own revision. A namespace of another tenant is refused by
``allowedNamespaces``: Failed ``BackendNotAllowed``, nothing installed.
"""

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_support import GROUP, RUNS, VERSION
from kubernetes import client, config
from stack_fixtures import start_stack
from stack_support import (
    BACKEND,
    EXAMPLES,
    backend_document,
    invoke,
    publish_spec,
    run_document,
    workflow_named,
)

from plnt_cli.supervisor import Supervisor
from plnt_common.bus.bus import Bus
from plnt_common.releases import desired_key, observed_key, release_name
from plnt_testkit.kube_emulator import KubeEmulator

RUN = "review-responder"
TENANT = "plnt.work/tenant"
NAMESPACES = {"team-a": "a", "team-b": "a", "team-c": "c"}
"""Namespace -> its tenant label; the backend allows tenant a only."""
VERSIONS = {"team-a": "1.0.0", "team-b": "1.1.0", "team-c": "1.0.0"}
"""Each namespace's run references its own version, so a route serving another's shows."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeEmulator, Path]]:
    with KubeEmulator(bookmark_interval_s=1.0) as emulator:
        kubeconfig = emulator.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
        api = config.new_client_from_config(config_file=str(kubeconfig))
        try:
            core = client.CoreV1Api(api)
            for namespace, tenant in NAMESPACES.items():
                core.create_namespace({"metadata": {"name": namespace, "labels": {TENANT: tenant}}})
            backend = backend_document()
            backend["spec"]["allowedNamespaces"] = {"matchLabels": {TENANT: "a"}}
            client.CustomObjectsApi(api).create_cluster_custom_object(
                GROUP, VERSION, "plntbackends", backend
            )
        finally:
            api.close()
        yield emulator, kubeconfig


@pytest.fixture(scope="module")
def stack(
    cluster: tuple[KubeEmulator, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Supervisor]:
    env = {
        "PLNT_WATCHER_SOURCE": "kubernetes",
        "PLNT_PULLER_BACKENDS": "kubernetes",
        "KUBECONFIG": str(cluster[1]),
    }
    supervisor = start_stack(tmp_path_factory.mktemp("tenants-stack"), env=env)
    yield supervisor
    supervisor.stop()


@pytest.fixture
async def bus(stack: Supervisor) -> AsyncIterator[Bus]:
    opened = await Bus.open(stack.config.nats_url, service="test", wait_for_server=True)
    yield opened
    await opened.close()


@pytest.fixture
def objects(cluster: tuple[KubeEmulator, Path]) -> Iterator[client.CustomObjectsApi]:
    api = config.new_client_from_config(config_file=str(cluster[1]))
    yield client.CustomObjectsApi(api)
    api.close()


async def create(objects: client.CustomObjectsApi, registry: Path, namespace: str) -> None:
    version = VERSIONS[namespace]
    publish_spec(registry, workflow_named(RUN, version))
    document = run_document(RUN, registry=registry, ref=f"{RUN}@{version}")
    document["metadata"]["namespace"] = namespace
    assert document["spec"]["backend"]["cluster"] == BACKEND
    await asyncio.to_thread(
        objects.create_namespaced_custom_object, GROUP, VERSION, namespace, RUNS, document
    )


async def wait_run(
    objects: client.CustomObjectsApi,
    namespace: str,
    check: Callable[[dict[str, Any]], bool],
    *,
    timeout_s: float = 90,
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = await asyncio.to_thread(
            objects.get_namespaced_custom_object, GROUP, VERSION, namespace, RUNS, RUN
        )
        if check(body):
            return body
        phase = (body.get("status") or {}).get("phase")
        if phase in ("Failed", "Ready"):  # ended otherwise: fail now, not at the deadline
            raise AssertionError(f"{namespace}/{RUN} ended {phase}: {body.get('status')}")
        await asyncio.sleep(0.2)
    raise AssertionError(f"{namespace}/{RUN} did not get there; last seen: {body.get('status')}")


def phase_is(phase: str) -> Callable[[dict[str, Any]], bool]:
    def check(body: dict[str, Any]) -> bool:
        status = body.get("status") or {}
        return (
            status.get("phase") == phase
            and status.get("observedGeneration") == body["metadata"]["generation"]
        )

    return check


async def record(bus: Bus, key: str) -> bytes | None:
    try:
        entry = await bus.releases.get(key)
    except Exception:  # absent or deleted
        return None
    return entry.value or None


async def test_two_namespaces_runs_of_one_name_roll_out_side_by_side_and_another_tenant_is_refused(
    bus: Bus, objects: client.CustomObjectsApi, tmp_path: Path
) -> None:
    registry = tmp_path / "registry"
    registry.mkdir()
    payload = (EXAMPLES / "invoke.json").read_text()
    for namespace in ("team-a", "team-b", "team-c"):
        await create(objects, registry, namespace)

    ready = {ns: await wait_run(objects, ns, phase_is("Ready")) for ns in ("team-a", "team-b")}
    for namespace, body in ready.items():
        release = release_name(namespace, RUN, 1)
        assert await record(bus, desired_key(namespace, release)), release
        assert await record(bus, observed_key(namespace, release)), release
        code, revision, _ = await invoke(body["status"]["endpoint"], json.loads(payload))
        assert (code, revision) == (200, f"{VERSIONS[namespace]}-g1"), namespace
    assert ready["team-a"]["status"]["endpoint"] != ready["team-b"]["status"]["endpoint"]

    refused = await wait_run(
        objects, "team-c", lambda body: (body.get("status") or {}).get("phase") == "Failed"
    )
    condition = {c["type"]: c for c in refused["status"].get("conditions", [])}
    reasons = {c.get("reason") for c in condition.values()}
    assert "BackendNotAllowed" in reasons, refused["status"]
    message = " ".join(c.get("message", "") for c in condition.values())
    assert "allowedNamespaces" in message and "team-c" in message, message
    assert await record(bus, desired_key("team-c", release_name("team-c", RUN, 1))) is None
