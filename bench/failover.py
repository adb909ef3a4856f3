"""``python -m bench --only failover``: serving failover when a backend is lost.

One revision spread over two backends, each an instant-runner process
(``bench.instant_runner``) on its own port; the router is the real app
(``plnt_router.app.create_app``, served as ``plnt serve router`` serves it) in this
process, its route table filled by hand and its runner client's sends recorded, so the
bench knows when a call was sent to which backend (a dead backend cannot say). A
sequential load calls the router throughout. Each of ``kills`` rounds SIGKILLs one
backend (the two in turn), lets the load run on for a second, starts the backend again on
the same port and waits until it answers calls again. Router settings are the defaults
(probe every 1 s, a 10 s ramp).
"""

import asyncio
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench.stats import percentile
from bench.table import Row, Verdict, render
from plnt_common.nats_server import free_port
from plnt_common.routes import BackendEndpoint, RouteEntry, RouteTarget
from plnt_router.app import RUNNER_CLIENT, app_runner, create_app
from plnt_router.settings import RouterSettings
from plnt_router.table import RouteTable

KILLS = 10
LOSS_TARGET_S = 5.0
REVISION = "bench"
AFTER_KILL_S = 1.0
START_TIMEOUT_S = 20.0


class _Backend:
    """An instant-runner process serving the revision at ``url``; ``kill`` is SIGKILL."""

    def __init__(self, name: str, port: int, log: Path) -> None:
        self.name = name
        self.port = port
        self.log = log
        self.process: asyncio.subprocess.Process | None = None
        self.url = f"http://127.0.0.1:{port}/revisions/{REVISION}"

    async def start(self, http: aiohttp.ClientSession) -> None:
        with self.log.open("ab") as out:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bench.instant_runner",
                str(self.port),
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                async with http.get(f"{self.url}/healthz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if self.process.returncode is not None:
                break
            await asyncio.sleep(0.02)
        raise RuntimeError(f"backend {self.name} did not start; see {self.log}")

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
            await self.process.wait()
        self.process = None


class _Sends:
    """Every call the router sent to a runner: (monotonic time, url, answered)."""

    def __init__(self) -> None:
        self.log: list[tuple[float, str, bool]] = []

    def to(self, backend: _Backend, *, after: float) -> list[tuple[float, bool]]:
        prefix = backend.url + "/"
        return [(at, ok) for at, url, ok in self.log if url.startswith(prefix) and at >= after]


async def _serve_router(table: RouteTable, sends: _Sends) -> tuple[web.AppRunner, str]:
    settings = RouterSettings(port=0, auth="none", shutdown_grace_s=1.0)
    app = create_app(settings=settings, table=table)
    client = app[RUNNER_CLIENT]
    real_post = client.post

    async def recorded_post(**kwargs: Any) -> Any:
        at = time.monotonic()
        try:
            reply = await real_post(**kwargs)
        except Exception:
            sends.log.append((at, kwargs["url"], False))
            raise
        sends.log.append((at, kwargs["url"], reply.status < 500))
        return reply

    client.post = recorded_post  # type: ignore[method-assign]
    runner = app_runner(app, settings=settings)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


class _Load:
    """Sequential calls until stopped; counts the answers that were not 200."""

    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.calls = 0
        self.lost: list[int] = []
        self._http = http
        self._url = url
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        body = json.dumps({"review": "failover"}).encode()
        headers = {"Content-Type": "application/json"}
        while not self._stop.is_set():
            async with self._http.post(self._url, data=body, headers=headers) as response:
                await response.read()
                self.calls += 1
                if response.status != 200:
                    self.lost.append(response.status)

    async def stop(self) -> None:
        self._stop.set()
        await self._task


async def _until(check: Any, what: str, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not seen within {within_s:g}s")
        await asyncio.sleep(0.01)


async def failover_figures(kills: int = KILLS) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="plnt-bench-failover-") as tmp:
        backends = [_Backend(name, free_port(), Path(tmp) / f"{name}.log") for name in "ab"]
        table = RouteTable()
        table.replace_all({})
        endpoints = [BackendEndpoint(backend=b.name, url=b.url) for b in backends]
        target = RouteTarget(revision=REVISION, url=backends[0].url, endpoints=endpoints)
        table.put(
            key="default.bench",
            entry=RouteEntry(namespace="default", name="bench", stable=target),
        )
        sends = _Sends()
        async with aiohttp.ClientSession() as http:
            for backend in backends:
                await backend.start(http)
            router, url = await _serve_router(table, sends)
            load = _Load(http, f"{url}/workflows/bench/invoke")
            to_last_send: list[float] = []
            failed_sends = 0
            in_flight = 0  # sent before the kill, cut by it
            to_back: list[float] = []
            try:
                for round_ in range(kills):
                    victim = backends[round_ % 2]
                    began = time.monotonic()
                    await _until(
                        lambda: all(len(sends.to(b, after=began)) >= 20 for b in backends),  # noqa: B023
                        "calls to both backends",
                    )
                    killed_at = time.monotonic()
                    await victim.kill()
                    await asyncio.sleep(AFTER_KILL_S)
                    lost_sends = sends.to(victim, after=killed_at)
                    to_last_send.append(lost_sends[-1][0] - killed_at if lost_sends else 0.0)
                    failed = [at for at, ok in sends.to(victim, after=began) if not ok]
                    failed_sends += len(failed)
                    in_flight += sum(1 for at in failed if at < killed_at)
                    restarted_at = time.monotonic()
                    await victim.start(http)
                    await _until(
                        lambda: any(ok for _, ok in sends.to(victim, after=restarted_at)),  # noqa: B023
                        "calls to the returned backend",
                    )
                    to_back.append(time.monotonic() - restarted_at)
            finally:
                await load.stop()
                await router.cleanup()
                for backend in backends:
                    await backend.kill()
    p50, worst = percentile(to_last_send, 0.5), max(to_last_send)
    return [
        Row.check(
            f"backend loss → last call sent to it, p50 / max over {kills} kills",
            f"{p50 * 1000:.0f} / {worst * 1000:.0f} ms",
            "",
            f"< {LOSS_TARGET_S:g} s",
            worst < LOSS_TARGET_S,
        ),
        Row.check(
            f"non-streamed calls lost ({load.calls} sequential calls over {kills} kills)",
            str(len(load.lost)),
            f"{failed_sends} sends failed on the lost backend ({in_flight} in flight at the "
            "kill), each re-sent to the other",
            "0",
            not load.lost,
        ),
        Row(
            "backend back → answering calls again, p50 / max",
            f"{percentile(to_back, 0.5) * 1000:.0f} / {max(to_back) * 1000:.0f} ms",
            "process start-up + the 1 s probe; its share then ramps over 10 s",
            "",
            Verdict.INFO,
        ),
    ]


def failover_section(kills: int = KILLS) -> None:
    rows = asyncio.run(failover_figures(kills))
    print(render("Serving failover", rows), end="\n\n")
