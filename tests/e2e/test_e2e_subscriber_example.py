"""examples/saga_progress.py, run as docs/subscribers.md says, follows a real saga."""

import asyncio
import os
import signal
import sys
from pathlib import Path

from stack_support import Client, publish_spec, run_document, workflow_named

from plnt_cli.supervisor import Supervisor

REPO = Path(__file__).resolve().parents[2]
SAGA_TO_READY = ["run.requested", "spec.pulled", "canary.installed", "smoke.passed", "run.ready"]


async def lines_until(stream: asyncio.StreamReader, last: str, timeout_s: float) -> list[str]:
    lines: list[str] = []
    async with asyncio.timeout(timeout_s):
        while not lines or lines[-1] != last:
            raw = await stream.readline()
            assert raw, f"the example ended early; it printed {lines}"
            lines.append(raw.decode().strip())
    return lines


async def test_the_example_prints_each_step_of_a_saga_to_its_end(
    stack: Supervisor, client: Client, registry: Path
) -> None:
    example = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "faststream",
        "run",
        "examples.saga_progress:app",
        cwd=REPO,
        env={
            **os.environ,
            "PLNT_NATS_URL": stack.config.nats_url,
            "SAGA_PROGRESS_DURABLE": "saga-progress-e2e",
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert example.stdout is not None
        publish_spec(registry, workflow_named("followed"))
        assert await client.apply(run_document("followed", registry=registry)) == "created"
        sagaid = "default.followed.1.1"
        lines = await lines_until(
            example.stdout, f"default/followed {sagaid} ended: ready", timeout_s=90
        )
        printed = [line.split()[2] for line in lines if line.startswith("default/followed ")]
        steps = [step for step in printed if step in SAGA_TO_READY]
        assert steps == SAGA_TO_READY, lines  # each once, in saga order
        # Its own durable: the services got every event too (the run becomes Ready).
        await client.wait_phase("followed", "Ready", timeout_s=30)
    finally:
        example.send_signal(signal.SIGTERM)
        await asyncio.wait_for(example.wait(), timeout=20)
