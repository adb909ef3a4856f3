"""Rollback latency: from ``rollback.requested`` to the router answering from the kept
previous revision (``x-plnt-revision``), on the real embedded stack.

Runs are prepared in batches (1.2.0 Ready, then 2.0.0 Ready with
``rollback.keepPreviousFor``); each rollback is then measured alone while one caller
invokes the run through the router back to back, and the batch is deleted.

    python -m bench --only rollback
"""

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from bench.deploy import embedded_stack
from bench.stats import percentile
from plnt_common.bus.bus import Bus
from plnt_common.events import EventType, OperatorRequest, new_event
from plnt_common.resource_store import ResourceStore
from plnt_common.resources import parse_resource

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SPEC = EXAMPLES / "registry" / "review-responder" / "1.2.0" / "workflow.yaml"
BATCH = 5
TARGET_MS = 100.0


def run_document(name: str, registry: Path, version: str) -> dict[str, Any]:
    run: dict[str, Any] = yaml.safe_load((EXAMPLES / "workflowrun-local.yaml").read_text())
    run["metadata"]["name"] = name
    run["spec"]["workflow"] = {"ref": f"{name}@{version}", "registry": registry.as_uri()}
    run["spec"]["smokeTest"]["invocations"] = 1
    run["spec"]["rollback"] = {"keepPreviousFor": "10m"}
    return run


def publish(registry: Path, name: str, version: str) -> None:
    document = yaml.safe_load(SPEC.read_text())
    document["metadata"].update(name=name, version=version)
    target = registry / name / version / "workflow.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(document))


async def wait_phase(store: ResourceStore, name: str, phase: str, generation: int) -> str:
    """The run's endpoint once it is ``phase`` at ``generation``."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        stored = await store.get("WorkflowRun", "default", name)
        status = (stored.body.get("status") or {}) if stored else {}
        if status.get("phase") == phase and status.get("observedGeneration") == generation:
            return str(status["endpoint"])
        await asyncio.sleep(0.02)
    raise RuntimeError(f"{name} never became {phase} (generation {generation})")


async def switch_s(bus: Bus, http: aiohttp.ClientSession, name: str, endpoint: str) -> float:
    """Seconds from the request until a call is answered by 1.2.0, measured by one caller."""
    body = yaml.safe_load((EXAMPLES / "workflowrun-local.yaml").read_text())["spec"]
    payload = body["smokeTest"]["payload"]
    request = new_event(
        EventType.ROLLBACK_REQUESTED,
        OperatorRequest(by="bench"),
        namespace="default",
        name=name,
        sagaid=f"default.{name}.2.1",
        generation=2,
        source="bench",
    )
    requested = time.perf_counter()
    await bus.publish(request)
    while time.perf_counter() - requested < 30:
        async with http.post(endpoint, json=payload) as response:
            await response.read()
            if response.headers.get("x-plnt-revision", "").startswith("1.2.0-"):
                return time.perf_counter() - requested
    raise RuntimeError(f"{name}: the router never served 1.2.0 after the rollback")


async def measure(url: str, registry: Path, rollbacks: int) -> list[float]:
    bus = await Bus.open(url, service="bench-rollback")
    store = ResourceStore(bus)
    backend = yaml.safe_load((EXAMPLES / "backend-local.yaml").read_text())
    await store.apply(parse_resource(backend))
    timings: list[float] = []
    async with aiohttp.ClientSession() as http:
        for first in range(0, rollbacks, BATCH):
            names = [f"rollback-{n}" for n in range(first, min(first + BATCH, rollbacks))]
            for version, generation in (("1.2.0", 1), ("2.0.0", 2)):
                for name in names:
                    publish(registry, name, version)
                    await store.apply(parse_resource(run_document(name, registry, version)))
                endpoints = [await wait_phase(store, n, "Ready", generation) for n in names]
            for name, endpoint in zip(names, endpoints, strict=True):
                timings.append(await switch_s(bus, http, name, endpoint))
                await wait_phase(store, name, "Reverted", 2)
            for name in names:
                await store.delete("WorkflowRun", "default", name)
    await bus.close()
    return timings


def rollback_section(rollbacks: int) -> None:
    with embedded_stack() as config:
        registry = config.data_dir / "registry"
        timings = asyncio.run(measure(config.nats_url, registry, rollbacks))
    p50, worst = percentile(timings, 0.5) * 1000, max(timings) * 1000
    print("### Rollback\n")
    print("| figure | p50 (ms) | max (ms) | target | result |")
    print("|---|---:|---:|---|---|")
    result = "met" if p50 <= TARGET_MS else "missed"
    label = f"`rollback.requested` → the router serving the kept revision ({len(timings)} runs)"
    print(f"| {label} | {p50:.1f} | {worst:.1f} | ≤ {TARGET_MS:g} ms p50 | {result} |")
