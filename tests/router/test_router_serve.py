"""The router process (``python -m plnt_router``): start-up line, readiness, graceful SIGTERM."""

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from nats.aio.client import Client

from plnt_common.bus.provision import ensure_jetstream
from plnt_common.nats_server import free_port
from plnt_common.routes import RouteEntry
from plnt_common.subjects import ROUTES_BUCKET

Factory = Callable[..., Awaitable[Any]]
Wait = Callable[..., Awaitable[None]]
Spawn = Callable[..., Awaitable[tuple[asyncio.subprocess.Process, str]]]


@pytest.fixture
async def spawn_router(tmp_path: Path) -> AsyncIterator[Spawn]:
    """Start the router process against a NATS URL; returns it and the URL it printed.

    Keyword arguments are more ``PLNT_ROUTER_*`` settings; its log goes to ``router.log``."""
    processes: list[asyncio.subprocess.Process] = []

    async def spawn(nats_url: str, **settings: str) -> tuple[asyncio.subprocess.Process, str]:
        env = {
            **os.environ,
            "PLNT_NATS_URL": nats_url,
            "PLNT_ROUTER_PORT": "0",
            "PLNT_ROUTER_AUTH": "none",
            "PLNT_ROUTER_SHUTDOWN_GRACE_S": "10",
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
        return process, line.removeprefix("listening on ")

    yield spawn
    for process in processes:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_router_process_serves_routes_from_nats_and_finishes_in_flight_calls_on_sigterm(
    nc: Client,
    nats_url: str,
    start_runner: Factory,
    spawn_router: Spawn,
    http: aiohttp.ClientSession,
    wait_until: Wait,
) -> None:
    runner = await start_runner("1.0.0-g1", delay_s=1.0)
    js = nc.jetstream()
    await ensure_jetstream(js)
    kv = await js.key_value(ROUTES_BUCKET)
    entry = RouteEntry(namespace="default", name="echo", stable=runner.target())
    await kv.put("default.echo", entry.model_dump_json().encode())

    process, router = await spawn_router(nats_url)

    async def ready() -> int:
        async with http.get(f"{router}/readyz") as response:
            return response.status

    for _ in range(100):
        if await ready() == 200:
            break
        await asyncio.sleep(0.1)
    assert await ready() == 200

    async def invoke() -> tuple[int, str]:
        async with http.post(f"{router}/workflows/echo/invoke", json={"slow": True}) as response:
            return response.status, response.headers.get("x-plnt-revision", "")

    in_flight = asyncio.create_task(invoke())
    await wait_until(lambda: len(runner.bodies) == 1, what="call reached the runner")
    process.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(in_flight, timeout=10) == (200, "1.0.0-g1")
    assert await asyncio.wait_for(process.wait(), timeout=10) == 0


async def test_router_process_is_live_but_not_ready_without_nats(
    spawn_router: Spawn, http: aiohttp.ClientSession
) -> None:
    process, router = await spawn_router(f"nats://127.0.0.1:{free_port()}")
    async with http.get(f"{router}/healthz") as response:
        assert response.status == 200
    async with http.get(f"{router}/readyz") as response:
        assert response.status == 503
    process.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(process.wait(), timeout=10) == 0


async def test_router_process_answers_protocol_errors_and_late_headers_in_json_without_tracebacks(
    nats_url: str, spawn_router: Spawn, tmp_path: Path
) -> None:
    process, router = await spawn_router(nats_url, header_timeout_s="0.5")
    address = urlsplit(router)

    async def exchange(data: bytes) -> tuple[bytes, float]:
        reader, writer = await asyncio.open_connection(address.hostname, address.port)
        started = time.monotonic()
        writer.write(data)
        answer = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        return answer, time.monotonic() - started

    flood = b"GET /healthz HTTP/1.1\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(300))
    answer, _ = await exchange(flood + b"\r\n")
    assert answer.startswith(b"HTTP/1.0 400 ") or answer.startswith(b"HTTP/1.1 400 "), answer
    assert b'"code": "too_many_headers"' in answer

    answer, elapsed = await exchange(b"POST /workflows/x/invoke HTTP/1.1\r\nHost: x\r\n")
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout")
    assert b'"code": "header_timeout"' in answer
    assert elapsed < 1.5

    process.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(process.wait(), timeout=10) == 0
    log = (tmp_path / "router.log").read_text()
    assert log.count("router.header_timeout") == 1  # one line, no traceback
    assert "Traceback" not in log
    assert '"level": "error"' not in log
