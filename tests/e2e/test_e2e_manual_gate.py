"""The manual gate, `plnt promote [--full]` and `plnt abort` on the real stack: every service
its own process, the CLI a real subprocess, requests through annotations on the run."""

import asyncio
import contextlib
import copy
import io
import os
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from canary_load import Load
from stack_support import Client, invoke
from test_e2e_canary_steps import (
    CANARY,
    STABLE,
    ready_stable,
    route_of,
    stepped,
    wait_progressing,
)

from plnt_cli.commands import Session, replay
from plnt_cli.main import main
from plnt_cli.supervisor import Supervisor
from plnt_common.events import Envelope, EventType, OperatorRequest, new_event
from plnt_testkit.projections import stored_projections

INVOKE_BODY = {"review": "Free parking, lovely food", "brand_voice": "warm"}


async def plnt_process(stack: Supervisor, *args: str) -> tuple[int, str, str]:
    """The CLI as a user runs it, its own process: (exit code, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if k != "PLNT_NATS_URL"}
    env["PLNT_HOME"] = "/nonexistent-plnt-home"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "plnt_cli",
        "--nats",
        stack.config.nats_url,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=90)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def plnt(stack: Supervisor, *args: str) -> tuple[int, str, str]:
    """``plnt ARGS...`` as main() runs it, with no interpreter start per call (its own
    event loop, so in a thread; one call at a time: it takes stdout and stderr)."""

    def call() -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(["--nats", stack.config.nats_url, *args])
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
        return code, out.getvalue(), err.getvalue()

    return await asyncio.to_thread(call)


def refused_line(result: tuple[int, str, str]) -> str:
    code, _, err = result
    assert code == 1, result
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def gated(document: dict[str, Any], **canary: Any) -> dict[str, Any]:
    """Version 2.0.0 behind the manual gate; without steps it pauses after its smoke test."""
    changed = copy.deepcopy(document)
    changed["spec"]["workflow"]["ref"] = changed["spec"]["workflow"]["ref"].replace(
        "@1.0.0", "@2.0.0"
    )
    changed["spec"]["canary"].update(manualGate=True, **canary)
    return changed


async def paused(client: Client, registry: Path, name: str) -> dict[str, Any]:
    """The run Paused at the manual gate after its smoke test (no steps)."""
    document = await ready_stable(client, registry, name)
    await client.apply(gated(document))
    return await client.wait_phase(name, "Paused", generation=2, timeout_s=60)


async def saga_events(client: Client, name: str, sagaid: str) -> list[Envelope]:
    return [e for e in await client.events(name) if e.sagaid == sagaid]


def ended_within(events: list[Envelope], request: EventType, answer: EventType) -> float:
    """Seconds from the operator's request to the promoter's answer: the held step (30 s)
    ended at its next tick, not when its interval would have."""
    times = {e.event_type: e.time for e in events}
    return (times[answer] - times[request]).total_seconds()


async def annotate(client: Client, name: str, key: str, value: str) -> None:
    def with_annotation(body: dict[str, Any]) -> dict[str, Any]:
        body["metadata"].setdefault("annotations", {})[key] = value
        return body

    await client.store.mutate("WorkflowRun", "default", name, with_annotation)


async def annotations_cleared(client: Client, name: str) -> dict[str, Any]:
    body = await client.wait_for(
        name,
        lambda b: b is not None and not (b["metadata"].get("annotations") or {}),
        timeout_s=15,
        what="to lose its request annotations",
    )
    assert body is not None
    return body


async def serving_revision(client: Client, name: str) -> str:
    status, revision, _ = await invoke((await client.status(name))["endpoint"], INVOKE_BODY)
    assert status == 200
    return revision


async def test_a_gated_canary_waits_paused_after_its_last_step_until_plnt_promote(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    name = "gate-steps"
    document = await ready_stable(client, registry, name)
    endpoint = (await client.status(name))["endpoint"]
    change = stepped(document, [50], "1s", minInvocations=5)
    change["spec"]["canary"]["manualGate"] = True
    async with Load(endpoint, concurrency=2, pause_s=0.02).running():
        await client.apply(change)
        body = await client.wait_phase(name, "Paused", generation=2, timeout_s=60)
    status = body["status"]
    assert status["message"] == f"waiting at the manual gate: plnt promote {name}"
    assert (status["canary"]["step"], status["canary"]["trafficPercent"]) == ("1/1", 50)
    await asyncio.sleep(2)  # twice the step: it waits for a person, not a clock
    assert (await client.status(name))["phase"] == "Paused"

    code, out, err = await plnt_process(stack, "promote", name)
    assert code == 0, err
    assert out.splitlines()[-1] == f"workflowrun/{name} promoted: phase Ready"
    assert (await client.status(name))["revision"] == CANARY
    body = await annotations_cleared(client, name)
    assert body["metadata"]["generation"] == 2
    kinds = [e.event_type for e in await saga_events(client, name, f"default.{name}.2.1")]
    assert kinds[-3:] == [
        EventType.ANALYSIS_PASSED,
        EventType.PROMOTE_REQUESTED,
        EventType.RUN_READY,
    ]
    again = refused_line(await plnt(stack, "promote", name))
    assert again == f"plnt: workflowrun/{name} has nothing to promote: phase Ready"


async def test_promote_full_mid_step_skips_the_remaining_steps_at_once(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    name = "gate-full"
    document = await ready_stable(client, registry, name)
    await client.apply(stepped(document, [10, 50], "30s"))
    await wait_progressing(client, name)
    plain = refused_line(await plnt(stack, "promote", name))
    assert plain == (
        f"plnt: workflowrun/{name} has nothing to promote: phase Progressing "
        "(--full skips the remaining steps)"
    )
    # a plain promote that reaches the promoter anyway (published past the watcher's
    # check) neither ends the held step nor promotes
    plain_request = new_event(
        EventType.PROMOTE_REQUESTED,
        OperatorRequest(by="test"),
        namespace="default",
        name=name,
        sagaid=f"default.{name}.2.1",
        generation=2,
        source="test",
    )
    assert await client.bus.publish(plain_request, step="test")
    await asyncio.sleep(2.5)  # two ticks of the held step
    assert (await client.status(name))["phase"] == "Progressing"
    code, out, err = await plnt_process(stack, "promote", name, "--full")
    assert code == 0, err
    assert out.splitlines()[-1] == f"workflowrun/{name} promoted: phase Ready"
    assert await serving_revision(client, name) == CANARY
    events = await saga_events(client, name, f"default.{name}.2.1")
    assert ended_within(events, EventType.PROMOTE_REQUESTED, EventType.RUN_READY) < 5
    kinds = [e.event_type for e in events]
    assert EventType.ANALYSIS_PASSED not in kinds
    assert [e.event_type for e in events if e.event_type.is_terminal] == [EventType.RUN_READY]
    requests = [e.data for e in events if e.event_type is EventType.PROMOTE_REQUESTED]
    assert requests[-1] == {"by": "plnt.work/promote=full", "full": True}


async def test_abort_mid_step_rolls_back_at_once_and_the_stable_serves(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    name = "gate-abort-step"
    document = await ready_stable(client, registry, name)
    await client.apply(stepped(document, [10], "30s"))
    await wait_progressing(client, name)
    code, out, err = await plnt_process(stack, "abort", name)
    assert code == 0, err
    assert out.splitlines()[-1] == f"workflowrun/{name} aborted: phase RolledBack"
    status = await client.status(name)
    assert "aborted by the operator (plnt.work/abort=" in status["message"]
    assert status["message"].endswith(f"{STABLE} keeps serving")
    assert await serving_revision(client, name) == STABLE
    events = await saga_events(client, name, f"default.{name}.2.1")
    terminals = [(e.event_type, e.data["reason"]) for e in events if e.event_type.is_terminal]
    assert terminals == [(EventType.RUN_ROLLED_BACK, "Aborted")]
    assert ended_within(events, EventType.ABORT_REQUESTED, EventType.ROUTE_RESTORED) < 5
    assert not {EventType.ANALYSIS_PASSED, EventType.ANALYSIS_FAILED} & {
        e.event_type for e in events
    }


async def test_abort_while_paused_rolls_back_and_the_stable_serves(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    name = "gate-abort-paused"
    await paused(client, registry, name)
    code, out, err = await plnt(stack, "abort", name)
    assert code == 0, err
    assert out.splitlines()[-1] == f"workflowrun/{name} aborted: phase RolledBack"
    assert await serving_revision(client, name) == STABLE
    events = await saga_events(client, name, f"default.{name}.2.1")
    restored = next(e for e in events if e.event_type is EventType.ROUTE_RESTORED)
    assert restored.data["reason"] == "Aborted"
    again = refused_line(await plnt(stack, "abort", name))
    assert again == f"plnt: workflowrun/{name} has nothing to abort: phase RolledBack"


async def test_annotations_set_on_the_store_promote_and_refusals_are_removed(
    client: Client, registry: Path
) -> None:
    name = "gate-annotated"
    await paused(client, registry, name)
    stamp = datetime.now(UTC).isoformat()
    await annotate(client, name, "plnt.work/promote", stamp)
    body = await client.wait_phase(name, "Ready", generation=2, timeout_s=30)
    assert body["status"]["revision"] == CANARY
    body = await annotations_cleared(client, name)
    assert body["metadata"]["generation"] == 2
    # the same annotation value again is the same request: refused (Ready) and removed
    await annotate(client, name, "plnt.work/promote", stamp)
    await annotate(client, name, "plnt.work/abort", "now")
    await annotations_cleared(client, name)
    await asyncio.sleep(0.5)
    events = await client.events(name)
    assert [e.event_type for e in events].count(EventType.PROMOTE_REQUESTED) == 1
    assert EventType.ABORT_REQUESTED not in {e.event_type for e in events}
    assert (await client.status(name))["phase"] == "Ready"


@pytest.mark.slow  # two rollouts; the rollback itself is answered elsewhere
async def test_rollback_is_refused_without_keep_previous_and_published_with_it(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    name = "gate-rollback"
    document = await ready_stable(client, registry, name)
    refused = refused_line(await plnt(stack, "rollback", name))
    assert refused == f"plnt: workflowrun/{name} has no previous revision kept to roll back to"
    kept = copy.deepcopy(document)
    kept["spec"]["rollback"] = {"keepPreviousFor": "10m"}
    kept["spec"]["workflow"]["ref"] = kept["spec"]["workflow"]["ref"].replace("@1.0.0", "@2.0.0")
    await client.apply(kept)
    await client.wait_phase(name, "Ready", generation=2, timeout_s=60)
    await annotate(client, name, "plnt.work/rollback", "now")
    await annotations_cleared(client, name)
    for _ in range(50):
        requests = [
            e for e in await client.events(name) if e.event_type is EventType.ROLLBACK_REQUESTED
        ]
        if requests:
            break
        await asyncio.sleep(0.1)
    assert [e.sagaid for e in requests] == [f"default.{name}.2.1"]  # the Ready saga's


async def test_refusals_and_bad_arguments_are_one_line(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    name = "gate-refusals"
    await ready_stable(client, registry, name)
    assert refused_line(await plnt(stack, "abort", name)) == (
        f"plnt: workflowrun/{name} has nothing to abort: phase Ready"
    )
    missing = refused_line(await plnt(stack, "promote", "no-such-run"))
    assert missing == "plnt: workflowruns 'no-such-run' not found in namespace 'default'"
    code, _, err = await plnt(stack, "promote", "Not_A_Name")
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    code, _, err = await plnt(stack, "abort", name, "--full")
    assert code == 2 and "--full" in err and len(err.strip().splitlines()) == 1


async def test_a_spec_change_while_paused_ends_the_paused_saga_superseded(
    client: Client, registry: Path
) -> None:
    name = "gate-changed"
    document = await ready_stable(client, registry, name)
    await client.apply(gated(document))
    await client.wait_phase(name, "Paused", generation=2, timeout_s=60)
    third = copy.deepcopy(document)
    third["spec"]["canary"]["trafficPercent"] = 20
    await client.apply(third)
    body = await client.wait_phase(name, "Ready", generation=3, timeout_s=60)
    assert body["status"]["revision"] == "1.0.0-g3"
    for _ in range(100):  # the paused saga ends too, once
        events = await saga_events(client, name, f"default.{name}.2.1")
        if any(e.event_type.is_terminal for e in events):
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)
    events = await saga_events(client, name, f"default.{name}.2.1")
    terminals = [(e.event_type, e.data["reason"]) for e in events if e.event_type.is_terminal]
    assert terminals == [(EventType.RUN_ROLLED_BACK, "Superseded")]
    for _ in range(100):  # and its canary release is removed
        if not [key for key in await client.release_keys(name) if key.endswith("-g2")]:
            break
        await asyncio.sleep(0.1)
    assert [key for key in await client.release_keys(name) if key.endswith("-g2")] == []


async def test_a_delete_while_paused_removes_the_run(client: Client, registry: Path) -> None:
    name = "gate-deleted"
    await paused(client, registry, name)
    assert await client.store.delete("WorkflowRun", "default", name) == "deleting"
    await client.wait_for(name, lambda body: body is None, timeout_s=30, what="to disappear")
    for _ in range(100):
        if await route_of(client, name) is None:
            break
        await asyncio.sleep(0.1)
    assert await route_of(client, name) is None
    assert await client.release_keys(name) == []
    await asyncio.sleep(0.5)
    events = await saga_events(client, name, f"default.{name}.2.1")
    # the paused saga ends too, once (rolled back, or failed when the deletion removed its
    # canary first)
    assert [e.data["reason"] for e in events if e.event_type.is_terminal] == ["Superseded"]


@pytest.mark.slow  # waits out the promoter's restart
async def test_a_promoter_killed_while_paused_leaves_it_paused_then_promote_works(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    name = "gate-kill-promoter"
    await paused(client, registry, name)
    promoter = next(p for p in stack.services() if p.name == "promoter")
    restarts = promoter.restarts
    os.kill(promoter.pid, signal.SIGKILL)
    for _ in range(200):
        if promoter.restarts > restarts:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(2)
    assert (await client.status(name))["phase"] == "Paused"
    code, out, err = await plnt(stack, "promote", name)
    assert code == 0, err
    assert out.splitlines()[-1] == f"workflowrun/{name} promoted: phase Ready"
    assert await serving_revision(client, name) == CANARY


async def test_replay_rebuilds_the_projection_of_gated_runs(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    await paused(client, registry, "gate-replay")
    await asyncio.sleep(0.5)  # the runs above are settled; let the watcher finish writing
    before = await stored_projections(client.bus.nc)
    assert before["default.gate-replay"].status.phase == "Paused"
    for key in before:
        await client.bus.runs.purge(key)
    session = await Session.open(stack.config.nats_url)
    try:
        await replay(session)
    finally:
        await session.close()
    assert await stored_projections(client.bus.nc) == before
