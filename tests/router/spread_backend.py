"""A runner-like HTTP server in its own process, so a test can kill it as a backend dies.

``python tests/router/spread_backend.py NAME PORT`` (PORT 0: any free one) serves the
runner's contract on 127.0.0.1: ``GET /healthz`` 200, ``POST /invoke`` answering JSON
``{"backend": NAME, "output": <input>}``, or for ``Accept: text/event-stream`` one
``token`` event every ``gap_s`` (the body's ``tokens``, default 3) then ``result``.
Prints ``listening <port>`` once it takes connections. Also importable: ``spawn``.
"""

import asyncio
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

BACKEND_HEADER = "x-test-backend"


def backend_app(name: str) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def invoke(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if request.headers.get("Accept") != "text/event-stream":
            return web.json_response(
                {"backend": name, "output": body}, headers={BACKEND_HEADER: name}
            )
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", BACKEND_HEADER: name}
        )
        await response.prepare(request)
        for n in range(int(body.get("tokens", 3))):
            token = {"delta": f"t{n} ", "reply": True, "backend": name}
            await response.write(f"event: token\ndata: {json.dumps(token)}\n\n".encode())
            await asyncio.sleep(float(body.get("gap_s", 0.05)))
        result = {"backend": name, "output": body, "reply": "done"}
        await response.write(f"event: result\ndata: {json.dumps(result)}\n\n".encode())
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_post("/invoke", invoke)
    return app


async def _serve(name: str, port: int) -> None:
    runner = web.AppRunner(backend_app(name), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, reuse_address=True).start()
    print(f"listening {runner.addresses[0][1]}", flush=True)
    await asyncio.Event().wait()


@dataclass
class Backend:
    """One backend's runner process (None: served in the test's own process); ``kill`` is
    SIGKILL, as a lost node would be."""

    name: str
    port: int
    process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
            await self.process.wait()


async def spawn(name: str, port: int = 0, *, within_s: float = 20.0) -> Backend:
    """Start a backend process and wait until it listens (a clear error if it does not)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__)),
        name,
        str(port),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), timeout=within_s)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"backend {name} did not listen within {within_s}s") from None
    if not line.startswith(b"listening "):
        await process.wait()
        raise AssertionError(f"backend {name} failed to start (exit {process.returncode})")
    return Backend(name=name, port=int(line.split()[1]), process=process)


if __name__ == "__main__":
    asyncio.run(_serve(sys.argv[1], int(sys.argv[2])))
