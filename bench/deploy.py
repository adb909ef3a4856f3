"""Apply-to-Ready of the demo's workflow on the real embedded stack, measured N times."""

import asyncio
import time
from pathlib import Path

import yaml

from plnt_common.bus.bus import Bus
from plnt_common.resource_store import ResourceStore
from plnt_common.resources import parse_resource
from plnt_common.workflow import spec_digest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


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
