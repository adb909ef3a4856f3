"""``spec.placement`` on the embedded stack with two `local` backends that declare their GPUs:
a run whose first backend is full is placed on the next, runs there, and says why the first
was passed over in ``status.placement`` and ``plnt get wr``'s BACKENDS column."""

import copy
from pathlib import Path
from typing import Any

from stack_support import Client, invoke, publish_spec, run_document, workflow_named
from test_e2e_local_backends import local_backend, process_of
from test_e2e_move import observed_backend, plnt

from plnt_cli.supervisor import Supervisor

GPU_CLASS = "nvidia.com/h100"


def with_gpus(name: str, capacity: int) -> dict[str, Any]:
    document = local_backend(name)
    document["spec"]["gpuClasses"][GPU_CLASS]["capacity"] = capacity
    return document


def placed(name: str, registry: Path, backends: list[str]) -> dict[str, Any]:
    document = copy.deepcopy(run_document(name, registry=registry))
    del document["spec"]["backend"]["cluster"]
    document["spec"]["placement"] = {"backends": backends}
    return document


async def test_a_full_first_backend_is_passed_over_and_the_run_serves_from_the_next(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    await client.apply(with_gpus("full-east", 1))
    await client.apply(with_gpus("roomy-west", 2))
    await process_of(stack, "full-east")
    await process_of(stack, "roomy-west")
    for name in ("filler", "spilled"):
        publish_spec(registry, workflow_named(name))
    await client.apply(placed("filler", registry, ["full-east"]))
    await client.wait_phase("filler", "Ready", timeout_s=90)

    await client.apply(placed("spilled", registry, ["full-east", "roomy-west"]))
    body = await client.wait_phase("spilled", "Ready", timeout_s=90)

    placement = body["status"]["placement"]
    assert [(e["backend"], e["state"]) for e in placement] == [
        ("roomy-west", "Serving"),
        ("full-east", "Skipped"),
    ]
    assert placement[1]["reason"] == "NoCapacity: no node has 1 free nvidia.com/gpu (largest 0)"
    assert await observed_backend(client, 1, run="spilled") == "roomy-west"
    code, revision, _ = await invoke(body["status"]["endpoint"], {"review": "fine"})
    assert (code, revision) == (200, "1.0.0-g1")

    code, out, err = await plnt(stack, "get", "wr", "spilled")
    assert code == 0, err
    header, row = out.splitlines()[:2]
    assert row.split()[header.split().index("BACKENDS")] == "roomy-west"
