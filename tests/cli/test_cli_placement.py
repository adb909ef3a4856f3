"""``plnt get wr`` shows the backends serving a run (status.placement in state Serving)."""

from typing import Any

from plnt_cli.render import workflowrun_rows


def run_body(status: dict[str, Any] | None = None, **placement: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"workflow": {"ref": "a@1.0.0", "registry": "oci://r.example/x"}}
    spec["placement"] = {"backends": ["gpu-east", "gpu-west"], **placement}
    body: dict[str, Any] = {
        "apiVersion": "plnt.work/v1",
        "kind": "WorkflowRun",
        "metadata": {"name": "placed", "namespace": "default"},
        "spec": spec,
    }
    if status is not None:
        body["status"] = status
    return body


def test_get_shows_only_the_serving_backends() -> None:
    status = {
        "phase": "Ready",
        "placement": [
            {"backend": "gpu-east", "state": "Skipped", "reason": "NoCapacity: no node"},
            {"backend": "gpu-west", "state": "Serving", "replicas": 1},
        ],
    }

    header, row = workflowrun_rows([run_body(status)]).splitlines()

    assert header.split()[6] == "BACKENDS"
    assert row.split()[6] == "gpu-west"


def test_get_shows_a_dash_before_any_backend_serves() -> None:
    _, row = workflowrun_rows([run_body({"phase": "Pending"})]).splitlines()

    assert row.split()[6] == "-"
