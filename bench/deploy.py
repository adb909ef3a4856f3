"""Apply-to-Ready of the demo's workflow on the real embedded stack, measured N times."""

import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

from plnt_cli.supervisor import StackConfig, Supervisor
from plnt_cli.up import wait_until_ready
from plnt_common.bus.bus import Bus
from plnt_common.nats_server import free_ports
from plnt_common.resource_store import ResourceStore
from plnt_common.resources import parse_resource
from plnt_common.workflow import spec_digest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@contextlib.contextmanager
def embedded_stack(env: dict[str, str] | None = None) -> Iterator[StackConfig]:
    """``plnt up``'s stack in a temporary data directory, ready; stopped on exit. ``env``:
    more environment for the stack's services (``StackConfig.extra_env``)."""
    with tempfile.TemporaryDirectory() as tmp:
        nats_port, router_port = free_ports(2)
        config = StackConfig(
            data_dir=Path(tmp),
            nats_port=nats_port,
            router_port=router_port,
            extra_env=dict(env or {}),
        )
        supervisor = Supervisor(
            config, say=lambda line: print(f"  [stack] {line}", file=sys.stderr)
        )
        supervisor.start()
        try:
            asyncio.run(wait_until_ready(config))
            yield config
        finally:
            supervisor.stop()


async def apply_to_ready(url: str, data_dir: Path, runs: int) -> list[float]:
    registry = data_dir / "registry"
    spec = EXAMPLES / "registry" / "review-responder" / "1.2.0" / "workflow.yaml"
    bus = await Bus.open(url, service="bench-deploy")
    store = ResourceStore(bus)
    await store.apply(parse_resource(yaml.safe_load((EXAMPLES / "backend-local.yaml").read_text())))
    timings = []
    for index in range(runs):
        name = f"bench-{index}"
        target = registry / name / "1.2.0" / "workflow.yaml"
        target.parent.mkdir(parents=True, exist_ok=True)
        document = yaml.safe_load(spec.read_text())
        document["metadata"]["name"] = name
        target.write_text(yaml.safe_dump(document))
        run = yaml.safe_load((EXAMPLES / "workflowrun.yaml").read_text())
        run["metadata"]["name"] = name
        run["spec"]["workflow"].update(
            ref=f"{name}@1.2.0",
            registry=registry.as_uri(),
            integrityHash=spec_digest(target.read_bytes()),
        )
        started = time.perf_counter()
        await store.apply(parse_resource(run))
        while True:
            stored = await store.get("WorkflowRun", "default", name)
            status = (stored.body.get("status") or {}) if stored else {}
            if status.get("phase") == "Ready":
                break
            if status.get("phase") in ("Failed", "RolledBack"):
                raise RuntimeError(f"{name} ended {status['phase']}: {status.get('message')}")
            await asyncio.sleep(0.005)
        timings.append(time.perf_counter() - started)
    await bus.close()
    return timings
