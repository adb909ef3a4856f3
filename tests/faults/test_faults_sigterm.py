"""SIGTERM lets the in-flight step finish and ack before the service exits."""

import asyncio
import json
import os
import signal
from collections import Counter
from pathlib import Path

from stack_support import Client, publish_spec, run_document, workflow_named
from test_faults_deadlines_and_deletes import reach

from plnt_cli.supervisor import Supervisor
from plnt_common.events import EventType


async def test_an_installer_stopped_mid_install_finishes_the_step_once(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    installer = next(p for p in stack.services() if p.name == "installer")
    publish_spec(registry, workflow_named("terminated"))
    reached = asyncio.create_task(reach(client, "terminated", "Installing"))
    await asyncio.sleep(0.1)
    await client.apply(run_document("terminated", registry=registry))
    await reached
    stopping = installer.process
    assert stopping is not None
    os.kill(stopping.pid, signal.SIGTERM)

    await client.wait_phase("terminated", "Ready")
    # The run can be Ready before the old process has drained and logged its stop.
    await asyncio.to_thread(stopping.wait, timeout=30)
    kinds = Counter(e.event_type for e in await client.events("terminated"))
    assert kinds[EventType.CANARY_INSTALLED] == 1
    lines = [
        json.loads(line)
        for line in installer.log_path.read_text().splitlines()
        if line.startswith("{")
    ]
    ours = [i for i, line in enumerate(lines) if line.get("sagaid") == "default.terminated.1.1"]
    installing = [i for i in ours if lines[i]["event"] == "canary.installing"]
    installed = [i for i in ours if lines[i]["event"] == "canary.installed"]
    stopped = [i for i, line in enumerate(lines) if line["event"] == "service.stopped"]
    assert len(installing) == 1, "the step ran more than once"
    assert installed and stopped, "the installer did not finish the step and stop cleanly"
    assert installed[0] < stopped[-1], "the installer exited before finishing the step"
