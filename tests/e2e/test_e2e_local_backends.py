"""Several `local` PlntBackends on one ``plnt up``: a local-backend process each.

Each backend's runner is started by its own process (counted by parent pid), a backend's
process killed with its runners leaves the other's run answering every call of a live
load, and a backend applied while up gets its process, which goes once it is deleted.
"""

import asyncio
import contextlib
import copy
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stack_support import (
    Client,
    LiveLoad,
    backend_document,
    invoke,
    publish_spec,
    run_document,
    workflow_named,
)

from plnt_cli.supervisor import ManagedProcess, Supervisor
from plnt_common.releases import release_name

PROCESS_WITHIN_S = 10.0
"""An applied backend's process starts on the supervisor's next tick: seconds at most."""


def local_backend(name: str) -> dict[str, Any]:
    document = copy.deepcopy(backend_document())
    document["metadata"]["name"] = name
    return document


async def wait_until(what: str, check: Callable[[], Any], *, within_s: float = 30.0) -> Any:
    deadline = time.monotonic() + within_s
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what}: not within {within_s:g}s"
        await asyncio.sleep(0.1)
    return found


async def process_of(stack: Supervisor, backend: str) -> ManagedProcess:
    def running() -> ManagedProcess | None:
        process = stack.local_backends().get(backend)
        return process if process is not None and process.pid else None

    found: ManagedProcess = await wait_until(
        f"local-backend of {backend}", running, within_s=PROCESS_WITHIN_S
    )
    return found


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rpartition(")")[2].split()[1])


def children_of(pid: int) -> list[int]:
    """Processes whose parent is ``pid``: a local-backend's runners (they run in their own
    session, but stay its children until it dies)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                if parent_of(int(entry.name)) == pid:
                    found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def observed(client: Client, run: str) -> dict[str, Any]:
    entry = await client.bus.releases.get(f"observed.default.{release_name('default', run, 1)}")
    record: dict[str, Any] = json.loads(entry.value or b"{}")
    return record


async def deploy_on(client: Client, registry: Path, run: str, backend: str) -> str:
    publish_spec(registry, workflow_named(run))
    await client.apply(run_document(run, registry=registry, backend=backend))

    def settled(body: dict[str, Any] | None) -> bool:
        return ((body or {}).get("status") or {}).get("phase") in ("Ready", "Failed")

    body = await client.wait_for(run, settled, timeout_s=90, what="to be Ready or Failed")
    assert body is not None
    assert body["status"]["phase"] == "Ready", body["status"].get("conditions")
    endpoint: str = body["status"]["endpoint"]
    return endpoint


async def test_two_local_backends_run_their_own_runners_and_losing_one_spares_the_other(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    for backend in ("east", "west"):
        await client.apply(local_backend(backend))
    east, west = await process_of(stack, "east"), await process_of(stack, "west")
    east_url, west_url = await asyncio.gather(
        deploy_on(client, registry, "on-east", "east"),
        deploy_on(client, registry, "on-west", "west"),
    )
    east_runner = int((await observed(client, "on-east"))["pid"])
    west_runner = int((await observed(client, "on-west"))["pid"])
    # Each runner started by its own backend's process, and only one each: a process that
    # ran every backend's releases would have started a second runner of the other's run.
    assert parent_of(east_runner) == east.pid
    assert parent_of(west_runner) == west.pid
    assert children_of(east.pid) == [east_runner]
    assert children_of(west.pid) == [west_runner]
    assert (await observed(client, "on-east"))["backend_name"] == "east"

    async with LiveLoad(west_url, revision="1.0.0-g1") as load:
        restarts = east.restarts
        east_pid = east.pid
        os.kill(east_pid, signal.SIGKILL)
        os.killpg(east_runner, signal.SIGKILL)

        await wait_until("east's local-backend restarted", lambda: east.restarts > restarts)
        await wait_until("east's local-backend running again", lambda: east.pid != east_pid)

        async def east_serves() -> bool:
            with contextlib.suppress(Exception):
                return (await invoke(east_url, {"review": "fine"}))[:2] == (200, "1.0.0-g1")
            return False

        deadline = time.monotonic() + 60
        while not await east_serves():
            assert time.monotonic() < deadline, (
                f"east never served again: {await observed(client, 'on-east')}"
            )
            await asyncio.sleep(0.2)

    assert not load.failures, load.failures[:5]
    assert len(load.calls) > 20, len(load.calls)
    # West untouched: same process, same runner, its observed record kept.
    assert stack.local_backends()["west"].pid == west.pid and west.restarts == 0
    assert alive(west_runner) and parent_of(west_runner) == west.pid
    assert int((await observed(client, "on-west"))["pid"]) == west_runner
    # East's runner was started again by east's new process.
    restarted = int((await observed(client, "on-east"))["pid"])
    assert restarted != east_runner and parent_of(restarted) == east.pid


async def test_a_backend_applied_while_up_gets_its_process_and_loses_it_when_deleted(
    client: Client, stack: Supervisor
) -> None:
    await client.apply(local_backend("third"))
    process = await process_of(stack, "third")
    pid = process.pid
    assert (stack.local_backend_root / "third").is_dir() or alive(pid)

    await client.store.delete("PlntBackend", None, "third")

    await wait_until("third's process stopped", lambda: "third" not in stack.local_backends())
    await wait_until("third's process gone", lambda: not alive(pid), within_s=15)
