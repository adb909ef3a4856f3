"""``plnt runner check``: a runner against the runner contract, one line per clause.

``plnt runner check URL`` checks clauses 2-6 against a runner that is running;
``plnt runner check --run "COMMAND" --workflow FILE`` starts the runner with the
``PLNT_RUNNER_*`` environment (no LLM settings: plnt's runner then answers offline) and
checks all seven. The clauses are judged by ``plnt_smoke.contract``, as the smoke step
judges a canary; this module only starts, watches and stops the process.
"""

import argparse
import asyncio
import contextlib
import os
import shlex
import signal
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from plnt_cli.arguments import json_body, read_data_argument
from plnt_cli.commands import parse_duration
from plnt_common import event_loop
from plnt_common.errors import PlntError, SpecInvalid
from plnt_common.nats_server import free_port
from plnt_smoke.adapters.contract import check_drain, check_served
from plnt_smoke.contract import (
    CONTRACT_VERSION,
    Clause,
    ClauseResult,
    judge_settings,
    not_checked,
)

HOST = "127.0.0.1"
DEFAULT_REVISION = "runner-check"
STDERR_LINES = 3
"""Lines of a runner's stderr quoted when it exits before serving."""
STOP_GRACE_S = 3.0


def add_parser(sub: Any) -> None:
    """``plnt runner check`` on the CLI's subcommands (``sub``, from ``add_subparsers``)."""
    runner = sub.add_parser("runner", help="check a runner against the runner contract")
    actions = runner.add_subparsers(dest="runner_command", required=True, metavar="ACTION")
    check = actions.add_parser(
        "check",
        help="check a runner against the runner contract (docs/runner-contract.md)",
        description="Check a runner against the runner contract, version "
        f"{CONTRACT_VERSION}: one line per clause, exit 1 when one is missed.",
    )
    check.add_argument("url", nargs="?", help="base URL of a running runner: clauses 2-6")
    check.add_argument(
        "--run", metavar="COMMAND", help="start the runner with COMMAND: all seven clauses"
    )
    check.add_argument(
        "--workflow", type=Path, metavar="FILE", help="with --run: PLNT_RUNNER_WORKFLOW_FILE"
    )
    check.add_argument(
        "--data", default="{}", help="JSON object the invocations send, or @file (default {})"
    )
    check.add_argument(
        "--revision",
        help=f"with --run: PLNT_RUNNER_REVISION (default {DEFAULT_REVISION}); with URL: the "
        "revision the runner must echo (default: any)",
    )
    check.add_argument(
        "--timeout", default="30s", help="wait for /healthz and for each answer (default 30s)"
    )


@dataclass(frozen=True)
class CheckRequest:
    url: str | None
    command: list[str]
    workflow: Path | None
    payload: dict[str, Any]
    revision: str | None
    timeout_s: float


def check_request(args: argparse.Namespace) -> CheckRequest:
    """The checked arguments; raises ``SpecInvalid`` naming the one that is wrong."""
    if (args.url is None) == (args.run is None):
        raise SpecInvalid("runner check takes a URL or --run COMMAND (one of them)")
    if args.run is not None and args.workflow is None:
        raise SpecInvalid("runner check --run needs --workflow FILE")
    if args.url is not None and args.workflow is not None:
        raise SpecInvalid("runner check URL: --workflow goes with --run")
    command = shlex.split(args.run) if args.run is not None else []
    if args.run is not None and not command:
        raise SpecInvalid("--run: the command is empty")
    workflow = None
    if args.workflow is not None:
        workflow = args.workflow.resolve()
        if not workflow.is_file():
            raise SpecInvalid(f"--workflow {args.workflow}: no such file")
    url = args.url.rstrip("/") if args.url is not None else None
    if url is not None and not url.startswith(("http://", "https://")):
        raise SpecInvalid(f"runner check {args.url}: give an http:// or https:// URL")
    payload = json_body(read_data_argument(args.data))
    if not isinstance(payload, dict):
        raise SpecInvalid("--data must be a JSON object: it is the body of an invocation")
    revision = args.revision
    if revision is None and args.run is not None:
        revision = DEFAULT_REVISION
    return CheckRequest(
        url=url,
        command=command,
        workflow=workflow,
        payload=payload,
        revision=revision,
        timeout_s=parse_duration(args.timeout),
    )


def run_check(args: argparse.Namespace, *, say: Callable[[str], None]) -> int:
    """Print one line per clause; 0 when every clause held, 1 otherwise."""
    request = check_request(args)
    results = event_loop.run(check_runner(request))
    for result in results:
        say(result.line())
    kept = sum(result.held for result in results)
    say(f"runner contract v{CONTRACT_VERSION}: {kept} of {len(results)} clauses hold")
    return 0 if kept == len(results) else 1


async def check_runner(request: CheckRequest) -> list[ClauseResult]:
    if request.url is not None:
        async with aiohttp.ClientSession() as session:
            return await check_served(
                session,
                request.url,
                payload=request.payload,
                revision=request.revision,
                timeout_s=request.timeout_s,
            )
    return await _check_started(request)


def runner_environment(
    base: Mapping[str, str], *, port: int, workflow: Path, revision: str
) -> dict[str, str]:
    """``base`` without any ``PLNT_RUNNER_*`` (no LLM settings), plus the four settings."""
    env = {name: value for name, value in base.items() if not name.startswith("PLNT_RUNNER_")}
    env.update(
        {
            "PLNT_RUNNER_HOST": HOST,
            "PLNT_RUNNER_PORT": str(port),
            "PLNT_RUNNER_WORKFLOW_FILE": str(workflow),
            "PLNT_RUNNER_REVISION": revision,
        }
    )
    return env


class _Exited(Exception):
    pass


async def _check_started(request: CheckRequest) -> list[ClauseResult]:
    assert request.workflow is not None
    assert request.revision is not None
    port = free_port(HOST)
    env = runner_environment(
        os.environ, port=port, workflow=request.workflow, revision=request.revision
    )
    started = time.monotonic()
    try:
        process = await asyncio.create_subprocess_exec(
            *request.command,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # Ctrl-C on plnt reaches plnt, which stops the runner
        )
    except OSError as exc:
        raise PlntError(
            f"--run: cannot start {request.command[0]}: {exc.strerror or exc}"
        ) from None
    stderr: deque[str] = deque(maxlen=STDERR_LINES)
    reading = asyncio.create_task(_keep_last_lines(process.stderr, stderr))

    def abort() -> None:
        if process.returncode is not None:
            raise _Exited

    url = f"http://{HOST}:{port}"
    try:
        try:
            async with aiohttp.ClientSession() as session:
                served = await check_served(
                    session,
                    url,
                    payload=request.payload,
                    revision=request.revision,
                    timeout_s=request.timeout_s,
                    started=started,
                    starting=True,
                    abort=abort,
                )
        except _Exited:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reading, timeout=1.0)
            said = " | ".join(stderr) or "nothing on stderr"
            raise PlntError(
                f"the runner exited with code {process.returncode} before /healthz answered "
                f"200; its last stderr lines: {said}"
            ) from None
        healthz = served[0]
        settings = judge_settings(address=f"{HOST}:{port}", healthz=healthz)
        if not healthz.held:
            unchecked = not_checked([Clause.SIGTERM], "/healthz never answered")
            return sorted([settings, *served, *unchecked], key=lambda result: result.clause)
        drain = await check_drain(
            url,
            payload=request.payload,
            terminate=lambda: process.send_signal(signal.SIGTERM),
            wait_exit=lambda seconds: _exit_code(process, seconds),
        )
        return sorted([settings, *served, drain], key=lambda result: result.clause)
    finally:
        await _stop(process)
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)


async def _keep_last_lines(stream: asyncio.StreamReader | None, lines: deque[str]) -> None:
    if stream is None:
        return
    async for raw in stream:
        line = raw.decode("utf-8", errors="replace").strip()
        if line:
            lines.append(line)


async def _exit_code(process: asyncio.subprocess.Process, seconds: float) -> int | None:
    try:
        return await asyncio.wait_for(process.wait(), timeout=seconds)
    except TimeoutError:
        return None


async def _stop(process: asyncio.subprocess.Process) -> None:
    """SIGTERM, then SIGKILL after ``STOP_GRACE_S``: the runner this command started is gone
    when it returns."""
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    if await _exit_code(process, STOP_GRACE_S) is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
