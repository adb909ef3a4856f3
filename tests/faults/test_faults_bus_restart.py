"""nats-server killed and restarted on the same store: nothing acknowledged is lost and
every service resumes consuming."""

import asyncio
from pathlib import Path

from stack_support import Client, publish_spec, run_document, workflow_named

from plnt_cli.supervisor import Supervisor


async def test_a_saga_applied_across_a_server_restart_completes(
    client: Client, registry: Path, stack: Supervisor
) -> None:
    publish_spec(registry, workflow_named("before-restart"))
    await client.apply(run_document("before-restart", registry=registry))
    await client.wait_phase("before-restart", "Ready")

    stack.restart_nats(kill=True)
    await asyncio.sleep(1.0)

    publish_spec(registry, workflow_named("after-restart"))
    await client.apply(run_document("after-restart", registry=registry))
    # services resume within seconds: pull consumers re-bind, KV watches restart
    await client.wait_phase("after-restart", "Ready", timeout_s=10)
    assert (await client.status("before-restart"))["phase"] == "Ready"
