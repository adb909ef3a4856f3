"""``plnt move NAME --to BACKEND`` on the embedded stack with two `local` backends: the run's
runner is made Ready on the new backend before the old one's is retired, so a live load sees
no failed call, and the refusals change nothing."""

import asyncio
import contextlib
import copy
import json
from pathlib import Path
from typing import Any

from stack_support import Client, LiveLoad, publish_spec, run_document, workflow_named
from test_e2e_local_backends import local_backend, process_of
from test_e2e_manual_gate import plnt, refused_line

from plnt_cli.supervisor import Supervisor
from plnt_common.events import EventType
from plnt_common.releases import release_name

RUN = "mover"


async def observed_backend(client: Client, generation: int, run: str = RUN) -> str | None:
    key = f"observed.default.{release_name('default', run, generation)}"
    with contextlib.suppress(Exception):
        entry = await client.bus.releases.get(key)
        record: dict[str, Any] = json.loads(entry.value or b"{}")
        return str(record.get("backend_name"))
    return None


async def test_a_move_makes_the_new_backend_ready_before_the_old_is_retired_under_live_load(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    for backend in ("east", "west"):
        await client.apply(local_backend(backend))
    await process_of(stack, "east")
    await process_of(stack, "west")
    publish_spec(registry, workflow_named(RUN))
    await client.apply(run_document(RUN, registry=registry, backend="east"))
    body = await client.wait_phase(RUN, "Ready", timeout_s=90)
    endpoint = body["status"]["endpoint"]
    assert await observed_backend(client, 1) == "east"

    # refused, in one line, with nothing changed
    assert refused_line(await plnt(stack, "move", RUN, "--to", "nowhere")) == (
        "plnt: PlntBackend 'nowhere' not found: plnt get backends lists them"
    )
    assert refused_line(await plnt(stack, "move", RUN, "--to", "east")) == (
        f"plnt: workflowrun/{RUN} already serves on east: nothing to move"
    )
    assert (await client.status(RUN))["observedGeneration"] == 1

    async with LiveLoad(endpoint) as load:
        code, out, err = await plnt(stack, "move", RUN, "--to", "west")
        await asyncio.sleep(1)  # calls after the old runner's retirement still answer
    assert code == 0, err
    assert out.splitlines()[-1] == f"workflowrun/{RUN} moved to west: phase Ready"
    assert load.failures == [], load.failures[:5]
    assert {revision for _, revision in load.calls} >= {"1.0.0-g1", "1.0.0-g2"}
    assert load.calls[-1] == (200, "1.0.0-g2")

    stored = await client.store.get("WorkflowRun", "default", RUN)
    assert stored is not None
    assert stored.body["spec"]["backend"]["cluster"] == "west"
    assert await observed_backend(client, 2) == "west"
    # Ready there before retired here: the canary on west answered its smoke test before
    # the promotion that retires the east release.
    kinds = [e.event_type for e in await client.events(RUN) if e.sagaid.endswith(".2.1")]
    assert kinds.index(EventType.SMOKE_PASSED) < kinds.index(EventType.RUN_READY)


async def test_a_run_mid_rollout_is_not_moved(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    name = "busy-mover"
    publish_spec(registry, workflow_named(name))
    publish_spec(registry, workflow_named(name, "2.0.0"))
    document = run_document(name, registry=registry, backend="east")
    await client.apply(document)
    await client.wait_phase(name, "Ready", timeout_s=90)
    gated = copy.deepcopy(document)
    gated["spec"]["workflow"]["ref"] = gated["spec"]["workflow"]["ref"].replace("@1.0.0", "@2.0.0")
    gated["spec"]["canary"]["manualGate"] = True
    await client.apply(gated)
    await client.wait_phase(name, "Paused", generation=2, timeout_s=60)

    line = refused_line(await plnt(stack, "move", name, "--to", "west"))
    assert line == (
        f"plnt: workflowrun/{name} is Paused: a move starts a rollout, so wait for this "
        f"one to end (or plnt abort {name}) first"
    )
    stored = await client.store.get("WorkflowRun", "default", name)
    assert stored is not None and stored.metadata["generation"] == 2
