"""Helpers for end-to-end tests: a real embedded stack, specs in a file registry, waits."""

import asyncio
import contextlib
import copy
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import KeyDeletedError, KeyNotFoundError

from plnt_cli.commands import Session, replay
from plnt_cli.supervisor import ManagedProcess, Supervisor
from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.history import read_events
from plnt_common.events import Envelope
from plnt_common.nats_server import free_port
from plnt_common.projection import RunProjection
from plnt_common.releases import DESIRED_PREFIX, OBSERVED_PREFIX, release_name
from plnt_common.resource_store import ResourceStore
from plnt_common.resources import parse_resource
from plnt_common.workflow import spec_digest
from plnt_testkit.projections import stored_projections

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BACKEND = "gpu-cluster-01"


def example_workflow() -> dict[str, Any]:
    path = EXAMPLES / "registry" / "review-responder" / "1.2.0" / "workflow.yaml"
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    return document


def publish_spec(registry: Path, document: dict[str, Any], *, raw: bytes | None = None) -> str:
    """Write a Workflow into the file registry; returns the digest of the bytes written."""
    name, version = document["metadata"]["name"], document["metadata"]["version"]
    target = registry / name / version / "workflow.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    data = raw if raw is not None else yaml.safe_dump(document, sort_keys=False).encode()
    target.write_bytes(data)
    return spec_digest(data)


def workflow_named(
    name: str, version: str = "1.0.0", *, steps: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    document = copy.deepcopy(example_workflow())
    document["metadata"] = {"name": name, "version": version}
    if steps is not None:
        document["spec"]["steps"] = steps
    return document


def run_document(
    name: str,
    *,
    registry: Path,
    ref: str | None = None,
    backend: str = BACKEND,
    integrity: str | None = None,
    smoke_invocations: int = 3,
    traffic_percent: int = 10,
) -> dict[str, Any]:
    workflow: dict[str, Any] = {"ref": ref or f"{name}@1.0.0", "registry": registry.as_uri()}
    if integrity:
        workflow["integrityHash"] = integrity
    return {
        "apiVersion": "plnt.work/v1",
        "kind": "WorkflowRun",
        "metadata": {"name": name},
        "spec": {
            "workflow": workflow,
            "backend": {"cluster": backend, "gpuClass": "nvidia.com/h100", "gpuCount": 1},
            "canary": {"trafficPercent": traffic_percent},
            "smokeTest": {
                "invocations": smoke_invocations,
                "p95BudgetMs": 5000,
                "errorBudgetPercent": 0,
                "payload": json.loads((EXAMPLES / "invoke.json").read_text()),
            },
        },
    }


async def service_process(
    stack: Supervisor, service: str, *, within_s: float = 10.0
) -> ManagedProcess:
    """The process of ``service``; for "local-backend", the one of ``BACKEND``, which
    ``plnt up`` starts a moment after the backend is applied."""
    names = (service, f"{service}-{BACKEND}")
    deadline = time.monotonic() + within_s
    while not (found := [p for p in stack.services() if p.name in names and p.pid]):
        assert time.monotonic() < deadline, f"no {service} process within {within_s:g}s"
        await asyncio.sleep(0.05)
    return found[0]


def backend_document() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((EXAMPLES / "backend-local.yaml").read_text())
    return document


class Client:
    """What a test does to the stack, through the same stores the CLI uses."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.store = ResourceStore(bus)

    async def apply(self, document: dict[str, Any]) -> str:
        _, outcome = await self.store.apply(parse_resource(copy.deepcopy(document)))
        return outcome

    async def status(self, name: str) -> dict[str, Any]:
        stored = await self.store.get("WorkflowRun", "default", name)
        assert stored is not None, f"{name} does not exist"
        status: dict[str, Any] = stored.body.get("status") or {}
        return status

    async def wait_for(
        self,
        name: str,
        check: Callable[[dict[str, Any] | None], bool],
        *,
        timeout_s: float = 60.0,
        what: str = "",
    ) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout_s
        last: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            try:
                stored = await self.store.get("WorkflowRun", "default", name)
            except NatsTimeoutError:
                # a read unanswered within the client's 5 s on a loaded machine is a poll
                # missed, not the run's answer: the wait's own deadline decides
                continue
            last = stored.body if stored else None
            if check(last):
                return last
            await asyncio.sleep(0.05)
        raise AssertionError(
            f"timed out waiting for {name} {what}; last: {json.dumps(last, default=str)[:2000]}"
        )

    async def wait_phase(
        self, name: str, phase: str, *, generation: int | None = None, timeout_s: float = 60.0
    ) -> dict[str, Any]:
        def reached(body: dict[str, Any] | None) -> bool:
            if body is None:
                return False
            status = body.get("status") or {}
            wanted_generation = generation or body["metadata"]["generation"]
            return bool(
                status.get("phase") == phase
                and status.get("observedGeneration") == wanted_generation
            )

        body = await self.wait_for(name, reached, timeout_s=timeout_s, what=f"to be {phase}")
        assert body is not None
        return body

    async def events(self, name: str) -> list[Envelope]:
        found = []
        async for stored in read_events(
            self.bus.nc, filter_subject=subjects.run_filter("default", name)
        ):
            assert stored.event is not None
            found.append(stored.event)
        return found

    async def release_keys(self, name: str, *, generations: int = 5) -> list[str]:
        """The run's desired and observed release keys that exist, read one by one."""
        found = []
        for generation in range(1, generations + 1):
            for prefix in (DESIRED_PREFIX, OBSERVED_PREFIX):
                key = f"{prefix}.default.{release_name('default', name, generation)}"
                try:
                    entry = await self.bus.releases.get(key)
                except (KeyNotFoundError, KeyDeletedError):
                    continue
                if entry.value:
                    found.append(key)
        return found

    async def observed_pids(self, name: str, *, generations: int = 5) -> list[int]:
        """Pids the local-backend reports for the run's releases (direct reads: a KV key
        listing is a consumer over the whole bucket and can come back short under load)."""
        pids = []
        for generation in range(1, generations + 1):
            try:
                key = f"{OBSERVED_PREFIX}.default.{release_name('default', name, generation)}"
                entry = await self.bus.releases.get(key)
            except (KeyNotFoundError, KeyDeletedError):
                continue
            if entry.value:
                pids.append(int(json.loads(entry.value).get("pid", 0)))
        return pids


async def invoke(url: str, body: dict[str, Any]) -> tuple[int, str, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.post(url, json=body) as response:
        payload = await response.json()
        return response.status, response.headers.get("x-plnt-revision", ""), payload


class LiveLoad:
    """Calls to ``url`` one after another while the block runs: every answer's (status,
    revision), and every failed call (a status other than 200, another revision than
    ``revision`` when given, or a refused or reset connection)."""

    def __init__(self, url: str, *, revision: str = "", pause_s: float = 0.02) -> None:
        self.calls: list[tuple[int, str]] = []
        self.failures: list[str] = []
        self._url, self._revision, self._pause_s = url, revision, pause_s
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> "LiveLoad":
        self._task = asyncio.create_task(self._load())
        return self

    async def __aexit__(self, *_: object) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def _load(self) -> None:
        while not self._stop.is_set():
            try:
                code, revision, _ = await invoke(self._url, {"review": "fine"})
                self.calls.append((code, revision))
                if code != 200 or revision != (self._revision or revision):
                    self.failures.append(f"{code} {revision}")
            except Exception as exc:  # a refused or reset call is a failed call
                self.failures.append(repr(exc))
            await asyncio.sleep(self._pause_s)


@contextlib.asynccontextmanager
async def delayed_endpoint(delay_s: float) -> AsyncIterator[str]:
    """A real HTTP endpoint that answers ``POST /`` after ``delay_s``: keeps a step busy."""

    async def answer(request: web.Request) -> web.Response:
        await asyncio.sleep(delay_s)
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/", answer)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()


async def replayed_projections(
    client: Client, nats_url: str
) -> tuple[dict[str, RunProjection], dict[str, RunProjection]]:
    """(the stored projections, the same after purging them and `plnt replay`)."""
    await asyncio.sleep(0.5)  # the runs are settled; let the watcher finish writing
    before = await stored_projections(client.bus.nc)
    for key in before:
        await client.bus.runs.purge(key)
    session = await Session.open(nats_url)
    try:
        await replay(session)
    finally:
        await session.close()
    return before, await stored_projections(client.bus.nc)
