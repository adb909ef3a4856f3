"""What the shadow traffic tests share: recording runners, the router process, the stream.

``ShadowRunner`` is a real aiohttp server speaking the runner contract: it records every
call (headers and body), answers JSON with ``x-plnt-cost-usd`` and ``x-plnt-effects``, or
SSE (tokens, then a result carrying ``effects``) when asked for a stream; it can be slow,
fail, or hold its answers until released. The router runs as its own process
(``python -m plnt_router``) against a real nats-server; routes are written to
``plnt-routes`` as the promoter writes them and pairs are read back from ``PLNT_SHADOW``.
"""

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from nats.aio.client import Client
from nats.js import JetStreamContext

from plnt_common.bus.provision import ensure_jetstream
from plnt_common.routes import RouteEntry, RouteTarget, route_key
from plnt_common.shadow_pairs import EffectCall, ShadowPair, ShadowRoute
from plnt_common.subjects import ROUTES_BUCKET, SHADOW_STREAM, shadow_subject

SAGA = "saga-shadow-1"
EFFECT = EffectCall(tool="tickets.create", input_sha256="ab" * 32)


@dataclass
class Received:
    headers: dict[str, str]
    body: Any

    @property
    def shadow(self) -> bool:
        return self.headers.get("x-plnt-shadow") == "1"

    @property
    def asks_effects(self) -> bool:
        return self.headers.get("x-plnt-effects") == "1"


@dataclass
class ShadowRunner:
    """A runner serving ``revision``; see the module docstring."""

    revision: str
    cost_usd: float = 0.01
    delay_s: float = 0.0
    status: int = 200
    gate: asyncio.Event | None = None
    pad_bytes: int = 0
    """Answers carry this many more bytes (a ``pad`` field)."""
    url: str = ""
    received: list[Received] = field(default_factory=list)

    def target(self) -> RouteTarget:
        return RouteTarget(revision=self.revision, url=self.url, saga_id=SAGA)

    @property
    def live(self) -> list[Received]:
        return [r for r in self.received if not r.shadow]

    @property
    def mirrored(self) -> list[Received]:
        return [r for r in self.received if r.shadow]

    def app(self) -> web.Application:
        async def invoke(request: web.Request) -> web.StreamResponse:
            body = await request.json()
            self.received.append(Received(headers=dict(request.headers), body=body))
            if self.gate is not None:
                await self.gate.wait()
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            if self.status >= 400:
                return web.Response(status=self.status, text="the canary broke")
            result = {"revision": self.revision, "output": {"echo": body}, "reply": "hi"}
            if self.pad_bytes:
                result["pad"] = "x" * self.pad_bytes
            effects = json.dumps([EFFECT.model_dump()], separators=(",", ":"))
            if "text/event-stream" in request.headers.get("Accept", ""):
                response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await response.prepare(request)
                token = {"delta": "hi", "reply": True}
                await response.write(f"event: token\ndata: {json.dumps(token)}\n\n".encode())
                final = {**result, "effects": [EFFECT.model_dump()]}
                await response.write(f"event: result\ndata: {json.dumps(final)}\n\n".encode())
                await response.write_eof()
                return response
            return web.json_response(
                result,
                headers={
                    "x-plnt-cost-usd": repr(self.cost_usd),
                    "x-plnt-tokens": "3,4",
                    "x-plnt-effects": effects,
                },
            )

        app = web.Application()
        app.router.add_post("/invoke", invoke)
        return app


StartShadowRunner = Callable[..., Awaitable[ShadowRunner]]
SpawnRouter = Callable[..., Awaitable[str]]


@pytest.fixture
def start_shadow_runner(start_app: Callable[..., Awaitable[str]]) -> StartShadowRunner:
    async def start(revision: str, **options: Any) -> ShadowRunner:
        runner = ShadowRunner(revision=revision, **options)
        runner.url = await start_app(runner.app())
        return runner

    return start


@pytest.fixture
async def js(nc: Client) -> JetStreamContext:
    """JetStream with plnt's streams and buckets provisioned (``PLNT_SHADOW`` among them)."""
    js = nc.jetstream()
    await ensure_jetstream(js)
    return js


@pytest.fixture
async def spawn_router(tmp_path: Path, nats_url: str) -> AsyncIterator[SpawnRouter]:
    """Start ``python -m plnt_router`` on the test's nats-server; returns its URL.

    Keyword arguments are more ``PLNT_ROUTER_*`` settings; its log goes to ``router.log``."""
    processes: list[asyncio.subprocess.Process] = []

    async def spawn(**settings: str) -> str:
        env = {
            **os.environ,
            "PLNT_NATS_URL": nats_url,
            "PLNT_ROUTER_PORT": "0",
            "PLNT_ROUTER_AUTH": "none",
            "PLNT_ROUTER_SHUTDOWN_GRACE_S": "1",
            **{f"PLNT_ROUTER_{name.upper()}": value for name, value in settings.items()},
        }
        with (tmp_path / "router.log").open("ab") as log:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "plnt_router",
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
            )
        processes.append(process)
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), timeout=20)).decode().strip()
        assert line.startswith("listening on http://127.0.0.1:"), line
        return line.removeprefix("listening on ")

    yield spawn
    for process in processes:
        if process.returncode is None:
            process.kill()
            await process.wait()


def shadow_entry(
    stable: ShadowRunner,
    canary: ShadowRunner,
    *,
    percent: int,
    noise_percent: int = 0,
    budget_usd: float | None = None,
    shadow: bool = True,
) -> RouteEntry:
    """The route the promoter writes while a run is Shadowing: canary at weight 0."""
    return RouteEntry(
        namespace="default",
        name="echo",
        stable=stable.target(),
        canary=canary.target(),
        canary_weight=0,
        shadow=ShadowRoute(
            saga_id=SAGA, percent=percent, noise_percent=noise_percent, budget_usd=budget_usd
        )
        if shadow
        else None,
    )


async def write_route(js: JetStreamContext, entry: RouteEntry) -> None:
    kv = await js.key_value(ROUTES_BUCKET)
    await kv.put(route_key(entry.namespace, entry.name), entry.model_dump_json().encode())


async def routed(
    http: aiohttp.ClientSession, router: str, stable: ShadowRunner, *, within_s: float = 10
) -> None:
    """Wait until the router serves the workflow from the route written to the bucket."""
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        async with http.get(f"{router}/v1/models") as response:
            if {m["id"] for m in (await response.json())["data"]} == {"echo"}:
                return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"the router did not load the route within {within_s}s")
        await asyncio.sleep(0.05)


async def stored_pairs(js: JetStreamContext) -> int:
    return (await js.stream_info(SHADOW_STREAM)).state.messages


async def read_pairs(js: JetStreamContext, *, count: int, within_s: float = 10) -> list[ShadowPair]:
    """Every pair on the stream once it holds ``count``; fails fast naming what arrived."""
    deadline = asyncio.get_running_loop().time() + within_s
    while (held := await stored_pairs(js)) < count:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{held} of {count} pairs on {SHADOW_STREAM} after {within_s}s")
        await asyncio.sleep(0.05)
    assert held == count, f"{held} pairs on the stream, expected {count}"
    sub = await js.pull_subscribe(shadow_subject("default", "echo"), stream=SHADOW_STREAM)
    messages = await sub.fetch(count, timeout=5)
    await sub.unsubscribe()
    return [ShadowPair.model_validate_json(m.data) for m in messages]


async def metric(http: aiohttp.ClientSession, router: str, name: str, **labels: str) -> float:
    """One sample of the router's /metrics (0 when the series does not exist yet)."""
    async with http.get(f"{router}/metrics") as response:
        text = await response.text()
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        if not series.startswith(name + "{") and series != name:
            continue
        found = series[len(name) :].strip("{}")
        if ",".join(sorted(found.split(","))) == wanted:
            return float(value)
    return 0.0
