"""Helpers of the local-backend tests: desired records, the example spec, polling, processes.

Imported by ``conftest.py`` and the test modules (a module name of its own, so it never
clashes with another directory's helpers).
"""

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest

from plnt_common.releases import DesiredRelease, LlmConfig, ReleaseRole
from plnt_local_backend.adapters.processes import stop_all_runners
from plnt_local_backend.settings import LocalBackendSettings

FAKE_RUNNER = Path(__file__).with_name("fake_runner.py")
STARTS_LOG = "fake-runner-starts.log"

SPEC = b"""\
apiVersion: microagents.dev/v1
kind: Workflow
metadata:
  name: review-responder
  version: 1.2.0
spec:
  runtime:
    image: ghcr.io/microagents/runner:0.4.0
    entrypoint: python -m review_responder
  steps:
    - id: classify_intent
      tool: llm.classify
    - id: retrieve_brand_voice
      tool: rag.query
      deps: [classify_intent]
    - id: draft_reply
      tool: llm.generate
      deps: [retrieve_brand_voice]
"""

T = TypeVar("T")


def fake_runner_command(*flags: str) -> list[str]:
    return [sys.executable, str(FAKE_RUNNER), *flags]


def desired_release(
    *,
    digest: str,
    release: str = "review-responder-g1",
    run_name: str = "review-responder",
    namespace: str = "default",
    revision: str = "1.2.0-g1",
    saga_id: str = "default.review-responder.1.1",
    role: ReleaseRole = ReleaseRole.CANARY,
    llm: LlmConfig | None = None,
) -> DesiredRelease:
    return DesiredRelease(
        namespace=namespace,
        run_name=run_name,
        release=release,
        revision=revision,
        role=role,
        saga_id=saga_id,
        spec_digest=digest,
        workflow_name="review-responder",
        llm=llm or LlmConfig(),
    )


async def eventually(
    probe: Callable[[], Awaitable[T | None]], *, timeout_s: float = 15.0, what: str = "condition"
) -> T:
    """Poll ``probe`` until it returns something truthy; fail the test after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = await probe()
        if value:
            return value
        if loop.time() >= deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.05)


def process_gone(pid: int) -> bool:
    """True when ``pid`` does not exist or is a zombie (exited, not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[:1] == ["Z"]
    except OSError:
        return True


def runner_starts(data_dir: Path, release: str, namespace: str = "default") -> list[int]:
    """Pids of every fake runner started for ``release`` (while its directory exists)."""
    path = data_dir / "releases" / namespace / release / STARTS_LOG
    if not path.exists():
        return []
    return [int(line) for line in path.read_text().split()]


async def http_get(url: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
        session.get(url) as response,
    ):
        return response.status, await response.json(content_type=None)


def fast_settings(*, nats_url: str, data_dir: Path, **overrides: Any) -> LocalBackendSettings:
    """Settings with short intervals, so restarts and timeouts happen within a test."""
    values: dict[str, Any] = {
        "nats_url": nats_url,
        "data_dir": data_dir,
        "runner_command": fake_runner_command(),
        "ready_timeout_s": 15.0,
        "restart_backoff_initial_s": 0.1,
        "restart_backoff_max_s": 0.5,
        "max_restarts": 3,
        "stop_grace_s": 3.0,
        "probe_interval_s": 0.05,
        "log_level": "debug",
    }
    values.update(overrides)
    return LocalBackendSettings(**values)


@dataclass
class InProcessBackend:
    """A local-backend running as a task of the test's loop."""

    settings: LocalBackendSettings
    stop_event: asyncio.Event = field(default_factory=asyncio.Event)
    task: "asyncio.Task[None] | None" = None

    async def stop(self) -> None:
        """SIGTERM equivalent: the service returns, runners keep running."""
        self.stop_event.set()
        if self.task is not None:
            await asyncio.wait_for(self.task, timeout=15)


@dataclass
class ServiceProcess:
    """A local-backend running as ``python -m plnt_local_backend``."""

    process: subprocess.Popen[bytes]
    log_path: Path

    def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=15)

    def kill(self) -> int:
        self.process.kill()
        return self.process.wait(timeout=15)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


StartBackend = Callable[..., Awaitable[InProcessBackend]]
SpawnBackend = Callable[..., ServiceProcess]


def kill_leftovers(data_dir: Path) -> None:
    """Stop runners via their pid files, then any fake runner a start log still names."""
    stop_all_runners(data_dir, grace_s=2.0)
    for starts in data_dir.glob(f"releases/*/*/{STARTS_LOG}"):
        for pid in (int(line) for line in starts.read_text().split()):
            if not process_gone(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)


def pid_files(data_dir: Path) -> list[Path]:
    """Every ``runner.pid`` left under ``data_dir``."""
    return sorted(data_dir.glob("releases/*/*/runner.pid"))
