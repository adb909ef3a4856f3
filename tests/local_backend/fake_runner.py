"""Stand-in runner of the local-backend tests: a real aiohttp process speaking the runner contract.

It reads the same ``PLNT_RUNNER_*`` variables as ``plnt_runner``, serves ``GET /healthz``
and ``POST /invoke``, and ``GET /info`` (what it was started with, for assertions). It
exits when the pid in ``PLNT_RUNNER_EXIT_WITH_PID`` is gone, as the real runner must.
Each start appends its pid to ``fake-runner-starts.log`` beside the workflow file, so
tests can count starts. Flags make it misbehave:

    --crash           exit with code 3 at once
    --never-healthy   answer /healthz with 503 for ever
    --ignore-sigterm  ignore SIGTERM (only SIGKILL stops it)
"""

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

from aiohttp import web

STARTS_LOG = "fake-runner-starts.log"


def main() -> None:
    flags = set(sys.argv[1:])
    workflow_file = Path(os.environ["PLNT_RUNNER_WORKFLOW_FILE"])
    with (workflow_file.parent / STARTS_LOG).open("a") as starts:
        starts.write(f"{os.getpid()}\n")
    if "--crash" in flags:
        print("fake runner: crashing on purpose", flush=True)
        raise SystemExit(3)
    asyncio.run(serve(workflow=workflow_file.read_text(), flags=flags))


async def serve(*, workflow: str, flags: set[str]) -> None:
    env = os.environ
    info = {
        "pid": os.getpid(),
        "workflow": workflow,
        "revision": env.get("PLNT_RUNNER_REVISION", ""),
        "llm_base_url": env.get("PLNT_RUNNER_LLM_BASE_URL", ""),
        "llm_model": env.get("PLNT_RUNNER_LLM_MODEL", ""),
        "llm_api_key": env.get("PLNT_RUNNER_LLM_API_KEY", ""),
        "exit_with_pid": env.get("PLNT_RUNNER_EXIT_WITH_PID", ""),
        "session_leader": os.getsid(0) == os.getpid(),
    }

    async def healthz(_: web.Request) -> web.Response:
        status = 503 if "--never-healthy" in flags else 200
        return web.json_response({"status": "ok" if status == 200 else "starting"}, status=status)

    async def invoke(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response(
            {"output": body, "revision": info["revision"]},
            headers={"x-plnt-revision": str(info["revision"])},
        )

    async def show_info(_: web.Request) -> web.Response:
        return web.json_response(info)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_post("/invoke", invoke)
    app.router.add_get("/info", show_info)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, env["PLNT_RUNNER_HOST"], int(env["PLNT_RUNNER_PORT"])).start()
    print(f"listening on http://{env['PLNT_RUNNER_HOST']}:{env['PLNT_RUNNER_PORT']}", flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    if "--ignore-sigterm" in flags:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        loop.add_signal_handler(signal.SIGTERM, stop.set)
    owner = int(env["PLNT_RUNNER_EXIT_WITH_PID"]) if env.get("PLNT_RUNNER_EXIT_WITH_PID") else 0
    while not stop.is_set():
        if owner and not _alive(owner):
            print(f"fake runner: owner {owner} is gone, exiting", flush=True)
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=0.1)
    await runner.cleanup()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie owner is gone too
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[:1] != ["Z"]
    except OSError:
        return True


if __name__ == "__main__":
    main()
