"""Every reader of Kubernetes objects takes them as a real API server returns them.

A real server adds metadata plnt does not keep on every write: ``managedFields`` (one
entry per field manager), ``ownerReferences``, ``generateName``, kubectl's
``last-applied-configuration`` annotation, and fields a newer server version adds. Readers
ignore them; a user's ``spec`` stays strict. The objects below are shaped like a
Kubernetes 1.30+ server's answers (kubectl client-side apply, then the watcher's status
writes), not like the test kit's fakes.
"""

import copy
import json
from typing import Any

import pytest
from kubernetes import client

from plnt_common.errors import SpecInvalid
from plnt_common.kube import _spec_of
from plnt_common.resources import PlntBackend, WorkflowRun, parse_resource
from plnt_installer.adapters.kube_readiness import _service_state
from plnt_watcher.adapters.lease import _record


def _managed_fields(*managers: tuple[str, str, str | None]) -> list[dict[str, Any]]:
    return [
        {
            "manager": manager,
            "operation": operation,
            "apiVersion": "plnt.work/v1",
            "time": "2026-12-04T09:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {".": {}, "f:workflow": {}}},
            **({"subresource": subresource} if subresource else {}),
        }
        for manager, operation, subresource in managers
    ]


REAL_METADATA: dict[str, Any] = {
    "uid": "7f0c1d2e-5b7a-4c1e-9a40-3f6f1e0b8c21",
    "generation": 2,
    "resourceVersion": "48213",
    "creationTimestamp": "2026-12-04T09:00:00Z",
    "generateName": "review-",
    "finalizers": ["plnt.work/cleanup"],
    "annotations": {
        "kubectl.kubernetes.io/last-applied-configuration": '{"apiVersion":"plnt.work/v1"}\n'
    },
    "ownerReferences": [
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Application",
            "name": "agents",
            "uid": "0e1f2a3b-0000-4000-8000-000000000001",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ],
    "managedFields": _managed_fields(
        ("kubectl-client-side-apply", "Update", None), ("plnt-watcher", "Update", "status")
    ),
    "selfLinkV2": "a field a newer server might add",
}


def _run() -> dict[str, Any]:
    return {
        "apiVersion": "plnt.work/v1",
        "kind": "WorkflowRun",
        "metadata": {"name": "review-responder", "namespace": "agents", **REAL_METADATA},
        "spec": {
            "workflow": {
                "ref": "review-responder@1.2.0",
                "registry": "s3://plnt-workflows/prod",
            },
            "backend": {"cluster": "gpu-cluster-01"},
        },
        "status": {
            "phase": "Ready",
            "observedGeneration": 2,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Promoted",
                    "message": "",
                    "lastTransitionTime": "2026-12-04T09:00:05Z",
                    "observedGeneration": 2,
                }
            ],
            "revision": "1.2.0-g2",
            "placementHint": "a status field a newer plnt writes",
        },
    }


def _backend() -> dict[str, Any]:
    meta = {k: v for k, v in REAL_METADATA.items() if k not in ("finalizers",)}
    return {
        "apiVersion": "plnt.work/v1",
        "kind": "PlntBackend",
        "metadata": {"name": "gpu-cluster-01", **meta},
        "spec": {"type": "kubernetes", "kubernetes": {"inCluster": True, "namespace": "agents"}},
    }


def test_a_workflowrun_as_a_real_server_returns_it_is_read_with_the_metadata_plnt_keeps() -> None:
    run = parse_resource(_run())

    assert isinstance(run, WorkflowRun)
    assert (run.metadata.name, run.metadata.namespace) == ("review-responder", "agents")
    assert (run.metadata.uid, run.metadata.generation) == (REAL_METADATA["uid"], 2)
    assert run.metadata.resource_version == "48213"
    assert run.metadata.finalizers == ("plnt.work/cleanup",)
    assert run.status is not None and run.status.revision == "1.2.0-g2"


def test_a_plntbackend_as_a_real_server_returns_it_is_read_by_the_resource_parser() -> None:
    backend = parse_resource(_backend())

    assert isinstance(backend, PlntBackend)
    assert backend.spec.kubernetes is not None and backend.spec.kubernetes.namespace == "agents"


def test_the_kubernetes_backend_catalog_reads_the_spec_of_a_real_servers_plntbackend() -> None:
    assert _spec_of(_backend()).type == "kubernetes"


@pytest.mark.parametrize(
    ("where", "key"),
    [("spec", "replica"), ("spec.workflow", "intgrityHash"), ("spec.canary", "trafficPercnt")],
    ids=["top-level", "nested", "canary"],
)
def test_an_unknown_key_in_a_real_servers_spec_is_still_refused_naming_it(
    where: str, key: str
) -> None:
    body = _run()
    node = body
    for part in where.split("."):
        node = node.setdefault(part, {})
    node[key] = 1

    with pytest.raises(SpecInvalid, match=rf"{where}\.{key}: Extra inputs are not permitted"):
        parse_resource(body)


def test_a_lease_with_a_real_servers_metadata_is_read_by_the_leader_election() -> None:
    body = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "plnt-watcher",
            "namespace": "plnt-system",
            **copy.deepcopy(REAL_METADATA),
        },
        "spec": {
            "holderIdentity": "watcher-0",
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-12-04T09:00:00.000000Z",
            "renewTime": "2026-12-04T09:00:10.000000Z",
            "leaseTransitions": 3,
        },
    }
    lease = client.ApiClient().deserialize(json.dumps(body), "V1Lease", "application/json")
    record = _record(lease)

    assert (record.holder, record.duration_s, record.transitions) == ("watcher-0", 15.0, 3)
    assert record.version == "48213"


def test_a_runner_service_with_a_real_servers_metadata_is_read_by_the_helm_observer() -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "agents-review-responder-g2",
            "namespace": "agents",
            "labels": {
                "plnt.work/revision": "1.2.0-g2",
                "plnt.work/workflowrun": "review-responder",
            },
            **{k: v for k, v in REAL_METADATA.items() if k not in ("annotations",)},
        },
        "spec": {"ports": [{"port": 8000, "protocol": "TCP", "targetPort": 8000}]},
    }

    state = _service_state(body, "agents", {"agents-review-responder-g2": (1, 0)})

    assert (state.name, state.run_name, state.revision, state.port, state.ready) == (
        "agents-review-responder-g2",
        "review-responder",
        "1.2.0-g2",
        8000,
        1,
    )
