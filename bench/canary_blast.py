"""Blast radius of a bad canary: how many user calls fail, and for how long, before a
stepped canary is taken out.

The whole embedded stack (``plnt up``'s supervisor), live load at 50 calls/s through the
router, and a canary that passes its smoke test but fails every live call (its only step
posts to an upstream here that answers 200 only for the smoke payload). Steps [5, 25],
stepInterval 30s, maxErrorPercent 1; no canary share during the smoke test, so every
failed call is one the steps let through. Beside it, the same figures computed for
Flagger's documented analysis (interval 1m, threshold 5, stepWeight 10) on the same load.

    python -m bench.canary_blast
"""

import asyncio
import contextlib
import json
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from plnt_cli.supervisor import StackConfig, Supervisor
from plnt_cli.up import wait_until_ready
from plnt_common.bus.bus import Bus
from plnt_common.nats_server import free_port, free_ports
from plnt_common.resource_store import ResourceStore
from plnt_common.resources import parse_resource

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RATE = 50.0
LIVE_BODY = {"review": "Lovely food, rude waiter", "brand_voice": "warm, concise"}
STABLE, CANARY = "1.0.0-g1", "2.0.0-g2"
FLAGGER = {"interval_s": 60.0, "threshold": 5, "step_weight": 10}


@contextlib.asynccontextmanager
async def parking_only_upstream() -> AsyncIterator[str]:
    async def answer(request: web.Request) -> web.Response:
        ok = "parking" in json.dumps(await request.json())
        return web.json_response({"ok": ok}, status=200 if ok else 500)

    app = web.Application()
    app.router.add_post("/", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()


def publish(registry: Path, version: str, steps: list[dict[str, Any]] | None) -> None:
    path = EXAMPLES / "registry" / "review-responder" / "1.2.0" / "workflow.yaml"
    document = yaml.safe_load(path.read_text())
    document["metadata"] = {"name": "blast", "version": version}
    if steps is not None:
        document["spec"]["steps"] = steps
    target = registry / "blast" / version / "workflow.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(document))


def run(registry: Path, version: str, canary: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "plnt.work/v1",
        "kind": "WorkflowRun",
        "metadata": {"name": "blast"},
        "spec": {
            "workflow": {"ref": f"blast@{version}", "registry": registry.as_uri()},
            "backend": {"cluster": "gpu-cluster-01", "gpuClass": "nvidia.com/h100"},
            "canary": canary,
            "smokeTest": {
                "invocations": 3,
                "p95BudgetMs": 5000,
                "errorBudgetPercent": 0,
                "payload": json.loads((EXAMPLES / "invoke.json").read_text()),
            },
        },
    }


async def wait_phase(store: ResourceStore, phase: str, generation: int) -> dict[str, Any]:
    while True:
        stored = await store.get("WorkflowRun", "default", "blast")
        status = (stored.body.get("status") or {}) if stored else {}
        if status.get("phase") == phase and status.get("observedGeneration") == generation:
            return status
        await asyncio.sleep(0.05)


async def open_loop(url: str, stop: asyncio.Event, calls: list[tuple[float, int, str]]) -> None:
    """RATE calls a second on a fixed schedule, whatever the answers take."""

    async def one(http: aiohttp.ClientSession) -> None:
        try:
            async with http.post(url, json=LIVE_BODY) as response:
                await response.read()
                revision = response.headers.get("x-plnt-revision", "")
                calls.append((time.monotonic(), response.status, revision))
        except (aiohttp.ClientError, TimeoutError):
            calls.append((time.monotonic(), 0, ""))

    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        tasks: set[asyncio.Task[None]] = set()
        start = time.monotonic()
        sent = 0
        while not stop.is_set():
            sent += 1
            task = asyncio.create_task(one(http))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            await asyncio.sleep(max(0.0, start + sent / RATE - time.monotonic()))
        await asyncio.gather(*tasks)


async def measure(data_dir: Path) -> tuple[dict[str, float], str]:
    nats_port, router_port = free_ports(2)
    config = StackConfig(data_dir=data_dir, nats_port=nats_port, router_port=router_port)
    supervisor = Supervisor(config, say=lambda line: None)
    supervisor.start()
    try:
        await wait_until_ready(config, timeout_s=60)
        bus = await Bus.open(config.nats_url, service="bench")
        store = ResourceStore(bus)
        registry = data_dir / "registry"
        backend = yaml.safe_load((EXAMPLES / "backend-local.yaml").read_text())
        await store.apply(parse_resource(backend))
        async with parking_only_upstream() as upstream:
            publish(registry, "1.0.0", None)
            judge = {"id": "judge", "tool": "http.request", "with": {"url": upstream}}
            publish(registry, "2.0.0", [judge])
            await store.apply(parse_resource(run(registry, "1.0.0", {"trafficPercent": 0})))
            endpoint = (await wait_phase(store, "Ready", 1))["endpoint"]
            calls: list[tuple[float, int, str]] = []
            stop = asyncio.Event()
            load = asyncio.create_task(open_loop(endpoint, stop, calls))
            await asyncio.sleep(2.0)
            stepped = {
                "trafficPercent": 0,
                "steps": [5, 25],
                "stepInterval": "30s",
                "analysis": {"minInvocations": 20, "maxErrorPercent": 1, "maxP95Ms": 5000},
            }
            await store.apply(parse_resource(run(registry, "2.0.0", stepped)))
            status = await wait_phase(store, "RolledBack", 2)
            await asyncio.sleep(2.0)
            stop.set()
            await load
        await bus.close()
    finally:
        supervisor.stop()
    on_canary = [c for c in calls if c[2] == CANARY]
    figures = {
        "failed": float(sum(1 for c in on_canary if c[1] >= 500)),
        "exposed_s": on_canary[-1][0] - on_canary[0][0] if on_canary else 0.0,
        "stable_failed": float(sum(1 for c in calls if c[2] == STABLE and c[1] != 200)),
        "calls": float(len(calls)),
    }
    return figures, str(status.get("message", ""))


def flagger() -> dict[str, float]:
    """Flagger on the same load: the first check after one interval at stepWeight, then
    ``threshold`` failed checks in a row (the weight holds while checks fail)."""
    seconds = FLAGGER["interval_s"] * FLAGGER["threshold"]
    return {"failed": RATE * FLAGGER["step_weight"] / 100 * seconds, "exposed_s": seconds}


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="plnt-blast-") as directory:
        plnt, message = asyncio.run(measure(Path(directory)))
    other = flagger()
    rows = [
        ("rollout", "failed user calls", "seconds the canary served", "stable calls failed"),
        (
            "plnt: steps [5, 25], stepInterval 30s, maxErrorPercent 1 (measured)",
            f"{plnt['failed']:.0f}",
            f"{plnt['exposed_s']:.1f}",
            f"{plnt['stable_failed']:.0f} of {plnt['calls']:.0f}",
        ),
        (
            "Flagger: interval 1m, threshold 5, stepWeight 10 (computed)",
            f"{other['failed']:.0f}",
            f"{other['exposed_s']:.0f}",
            "",
        ),
    ]
    for index, row in enumerate(rows):
        print("| " + " | ".join(row) + " |")
        if index == 0:
            print("|---|---|---|---|")
    print(f"status.message: {message}")


if __name__ == "__main__":
    main()
