"""The deploy plane end to end: real nats-server, every service a real process, real HTTP."""

import asyncio
import os
from pathlib import Path
from typing import Any

from nats.js.errors import KeyDeletedError, KeyNotFoundError
from stack_support import BACKEND, Client, invoke, publish_spec, run_document, workflow_named

from plnt_cli.supervisor import Supervisor
from plnt_common.events import EventType

EXAMPLE_BODY = {"review": "Great service but slow parking", "brand_voice": "warm, concise"}


async def collect_phases(client: Client, name: str, until: str, timeout_s: float = 60) -> list[str]:
    """Every phase the resource's status passes through, from the KV's ordered history."""
    phases: list[str] = []

    async def watch() -> None:
        async for stored in client.store.watch_object("WorkflowRun", "default", name):
            if stored is None:
                continue
            phase = (stored.body.get("status") or {}).get("phase")
            if phase and (not phases or phases[-1] != phase):
                phases.append(phase)
            if phase == until:
                return

    await asyncio.wait_for(watch(), timeout=timeout_s)
    return phases


async def test_apply_walks_the_phases_to_ready_and_the_endpoint_serves(
    client: Client, registry: Path
) -> None:
    digest = publish_spec(registry, workflow_named("happy"))
    watcher = asyncio.create_task(collect_phases(client, "happy", until="Ready"))
    await asyncio.sleep(0.2)  # the watch is open before the run exists
    assert await client.apply(run_document("happy", registry=registry)) == "created"

    phases = await watcher
    # A step shorter than the watcher's status linger (50 ms: the pull, a smoke test of
    # one offline call, the promotion) may not show as a phase; starting a runner does.
    # Every phase that shows comes in saga order, and the conditions record every step.
    saga_order = ["Pending", "Pulling", "Installing", "Smoking", "Promoting", "Ready"]
    assert phases[0] == "Pending" and phases[-1] == "Ready" and "Installing" in phases
    assert phases == [phase for phase in saga_order if phase in phases]
    status = await client.status("happy")
    assert status["revision"] == "1.0.0-g1"
    assert status["specDigest"] == digest
    assert status["endpoint"].endswith("/workflows/happy/invoke")
    assert status["observedGeneration"] == 1
    assert status["smoke"]["passed"] is True
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    # Serving is live state, merged in once the watcher has seen the promoted route.
    assert conditions.pop("Serving", "True") == "True"
    assert conditions == {
        "SpecPulled": "True",
        "CanaryInstalled": "True",
        "SmokePassed": "True",
        "Promoted": "True",
        "Ready": "True",
    }
    code, revision, answer = await invoke(status["endpoint"], EXAMPLE_BODY)
    assert code == 200
    assert revision == "1.0.0-g1"
    assert answer["output"]["reply"]


async def test_a_canary_that_fails_every_call_rolls_back_and_the_old_revision_keeps_serving(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    publish_spec(registry, workflow_named("canary-fail"))
    await client.apply(run_document("canary-fail", registry=registry))
    ready = await client.wait_phase("canary-fail", "Ready")
    endpoint = ready["status"]["endpoint"]
    broken_steps = [
        {"id": "call_home", "tool": "http.request", "with": {"url": "http://127.0.0.1:9/closed"}}
    ]
    publish_spec(registry, workflow_named("canary-fail", "2.0.0", steps=broken_steps))
    await client.apply(run_document("canary-fail", registry=registry, ref="canary-fail@2.0.0"))

    body = await client.wait_phase("canary-fail", "RolledBack", generation=2)
    status = body["status"]
    assert status["revision"] == "1.0.0-g1"
    assert status["smoke"]["passed"] is False
    assert "error rate" in status["smoke"]["reason"]
    for _ in range(20):
        code, revision, _ = await invoke(endpoint, EXAMPLE_BODY)
        assert (code, revision) == (200, "1.0.0-g1")
    keys = await client.release_keys("canary-fail")
    assert all(key.endswith("canary-fail-g1") for key in keys), keys
    for pid in await client.observed_pids("canary-fail"):
        assert pid_alive(pid)
    assert not any(p.name.startswith("default-canary-fail-g2") for p in runner_dirs(stack))


def runner_dirs(stack: Supervisor) -> list[Path]:
    root = stack.config.data_dir / "local-backend" / BACKEND / "releases" / "default"
    return list(root.iterdir()) if root.exists() else []


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def terminal_events(events: list[Any]) -> list[Any]:
    return [e for e in events if e.event_type.is_terminal]


async def test_an_integrity_mismatch_fails_naming_both_digests_and_installs_nothing(
    client: Client, registry: Path
) -> None:
    actual = publish_spec(registry, workflow_named("pinned"))
    expected = "sha256:" + "0" * 64
    await client.apply(run_document("pinned", registry=registry, integrity=expected))
    body = await client.wait_phase("pinned", "Failed")
    message = body["status"]["message"]
    assert expected in message and actual in message
    assert await client.release_keys("pinned") == []
    assert EventType.SPEC_PULLED not in [e.event_type for e in await client.events("pinned")]


async def test_a_cyclic_spec_fails_naming_the_cycle(client: Client, registry: Path) -> None:
    cyclic = workflow_named("cyclic")
    steps = [
        {"id": "a", "tool": "llm.generate", "deps": ["b"]},
        {"id": "b", "tool": "llm.classify", "deps": ["a"]},
    ]
    cyclic["spec"]["steps"] = steps
    publish_spec(registry, cyclic)
    await client.apply(run_document("cyclic", registry=registry))
    body = await client.wait_phase("cyclic", "Failed")
    assert "cycle" in body["status"]["message"]
    assert await client.release_keys("cyclic") == []


async def test_an_unknown_backend_fails_as_backend_unavailable(
    client: Client, registry: Path
) -> None:
    publish_spec(registry, workflow_named("orphan"))
    await client.apply(run_document("orphan", registry=registry, backend="no-such-cluster"))
    body = await client.wait_phase("orphan", "Failed")
    assert "BackendUnavailable" in body["status"]["message"]
    assert "no-such-cluster" in body["status"]["message"]


async def test_a_missing_registry_object_fails(client: Client, registry: Path) -> None:
    await client.apply(run_document("missing", registry=registry))
    body = await client.wait_phase("missing", "Failed")
    assert "SpecNotFound" in body["status"]["message"]


async def test_delete_removes_routes_releases_and_then_the_resource(
    client: Client, registry: Path
) -> None:
    publish_spec(registry, workflow_named("doomed"))
    await client.apply(run_document("doomed", registry=registry))
    ready = await client.wait_phase("doomed", "Ready")
    pids = await client.observed_pids("doomed")
    assert pids and all(pid_alive(p) for p in pids)

    assert await client.store.delete("WorkflowRun", "default", "doomed") == "deleting"
    await client.wait_for("doomed", lambda body: body is None, what="to disappear")
    assert await client.release_keys("doomed") == []
    route, _ = await routes_entry(client, "doomed")
    assert route is None
    await asyncio.sleep(0.5)
    assert not any(pid_alive(p) for p in pids)
    code, _, _ = await invoke(ready["status"]["endpoint"], EXAMPLE_BODY)
    assert code == 404
    kinds = [e.event_type for e in await client.events("doomed")]
    assert kinds[-2:] == [EventType.RUN_DELETED, EventType.RUN_REMOVED]
    assert kinds.count(EventType.RUN_DELETED) == 1


async def routes_entry(client: Client, name: str) -> tuple[bytes | None, int]:
    try:
        entry = await client.bus.routes.get(f"default.{name}")
    except (KeyNotFoundError, KeyDeletedError):  # removed; any other failure fails the test
        return None, 0
    return entry.value or None, entry.revision or 0


async def test_a_canary_that_cannot_start_fails_the_first_rollout_naming_why(
    client: Client, registry: Path
) -> None:
    await client.apply(
        {
            "apiVersion": "plnt.work/v1",
            "kind": "PlntBackend",
            "metadata": {"name": "keyless"},
            "spec": {
                "type": "local",
                "gpuClasses": {"nvidia.com/h100": {"resourceName": "nvidia.com/gpu"}},
                "llm": {
                    "baseUrl": "http://127.0.0.1:9/v1",
                    "model": "m",
                    "apiKeyEnv": "PLNT_UNSET_KEY",
                },
            },
        }
    )
    publish_spec(registry, workflow_named("keyless-run"))
    await client.apply(run_document("keyless-run", registry=registry, backend="keyless"))
    body = await client.wait_phase("keyless-run", "Failed")
    assert "PLNT_UNSET_KEY" in body["status"]["message"]
    kinds = [e.event_type for e in await client.events("keyless-run")]
    assert kinds[-2:] == [EventType.INSTALL_FAILED, EventType.RUN_FAILED]
    assert await client.release_keys("keyless-run") == []
