"""The standard-library runner of ``examples/stdlib-runner`` for tests: the example as it is,
variants of it that break one clause of the runner contract, and a running process of
either."""

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from plnt_common.nats_server import free_port

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "stdlib-runner"
RUNNER = EXAMPLE / "runner.py"
WORKFLOW = EXAMPLE / "workflow.yaml"

BREAKS: dict[str, tuple[str, str]] = {
    "no-tokens-header": (
        'tokens = {"x-plnt-tokens": f"{words},{words}"}',
        "tokens = {}",
    ),
    "no-result-event": (
        'sse("result", result)',
        'sse("done", result)',
    ),
    "new-trace": (  # answers in a trace of its own instead of the caller's
        'return {"traceparent": f"00-{trace_id}-',
        'return {"traceparent": f"00-{os.urandom(16).hex()}-',
    ),
}
"""Each broken variant: the text of runner.py it replaces, and what replaces it."""


def broken_runner(directory: Path, name: str) -> Path:
    """A copy of the example runner in ``directory`` with the ``BREAKS[name]`` change."""
    old, new = BREAKS[name]
    source = RUNNER.read_text()
    assert source.count(old) == 1, f"examples/stdlib-runner/runner.py no longer has {old!r}"
    path = directory / f"runner-{name}.py"
    path.write_text(source.replace(old, new))
    return path


@contextlib.asynccontextmanager
async def running(script: Path = RUNNER, *, revision: str = "r1") -> AsyncIterator[str]:
    """``script`` serving ``WORKFLOW`` on a free port; yields its base URL once it listens."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLNT_RUNNER_")}
    env |= {
        "PLNT_RUNNER_PORT": str(port),
        "PLNT_RUNNER_WORKFLOW_FILE": str(WORKFLOW),
        "PLNT_RUNNER_REVISION": revision,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), timeout=10)
        assert line.startswith(b"listening on "), f"{script.name} said {line!r}"
        yield f"http://127.0.0.1:{port}"
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
