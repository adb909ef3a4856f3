"""Fixtures of the local-backend tests: a real nats-server, real runner processes, real files.

Nothing is mocked. Runners are ``fake_runner.py`` processes (or the real ``plnt_runner``)
started by the real local-backend, which runs either as a task of the test's event loop
(``start_local_backend``) or as its own process (``spawn_local_backend``) when a test must
stop it the way an operator would. Every fixture cleans up the processes it caused.
"""

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from local_backend_support import (
    SPEC,
    InProcessBackend,
    ServiceProcess,
    SpawnBackend,
    StartBackend,
    fake_runner_command,
    fast_settings,
    kill_leftovers,
)

from plnt_common.bus.bus import Bus
from plnt_common.workflow import spec_digest
from plnt_installer.adapters.local_releases import LocalReleaseBackend
from plnt_local_backend.app import run


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "local-backend"


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    opened = await Bus.open(nats_url, service="test")
    yield opened
    await opened.close()


@pytest.fixture
def releases(bus: Bus) -> LocalReleaseBackend:
    return LocalReleaseBackend(bus, resync_s=0.2)


@pytest.fixture
async def spec(bus: Bus) -> str:
    """The example spec stored in plnt-specs under its digest; returns the digest."""
    digest = spec_digest(SPEC)
    await bus.specs.put(digest, SPEC)
    return digest


@pytest.fixture
async def start_local_backend(nats_url: str, data_dir: Path) -> AsyncIterator[StartBackend]:
    """Start ``plnt_local_backend.app.run`` in this loop; keyword arguments override settings."""
    started: list[InProcessBackend] = []

    async def start(**overrides: Any) -> InProcessBackend:
        settings = fast_settings(nats_url=nats_url, data_dir=data_dir, **overrides)
        backend = InProcessBackend(settings=settings)
        backend.task = asyncio.create_task(run(settings, backend.stop_event))
        started.append(backend)
        return backend

    yield start
    for backend in started:
        backend.stop_event.set()
        if backend.task is not None:
            await asyncio.wait({backend.task}, timeout=15)
    kill_leftovers(data_dir)


@pytest.fixture
def spawn_local_backend(nats_url: str, data_dir: Path, tmp_path: Path) -> Iterator[SpawnBackend]:
    """Start the local-backend as its own process; keyword arguments become its env."""
    spawned: list[ServiceProcess] = []

    def spawn(**env_overrides: str) -> ServiceProcess:
        env = {
            **os.environ,
            "PLNT_NATS_URL": nats_url,
            "PLNT_LOG_LEVEL": "debug",
            "PLNT_LOCAL_BACKEND_DATA_DIR": str(data_dir),
            "PLNT_LOCAL_BACKEND_RUNNER_COMMAND": json.dumps(fake_runner_command()),
            "PLNT_LOCAL_BACKEND_RESTART_BACKOFF_INITIAL_S": "0.1",
            "PLNT_LOCAL_BACKEND_RESTART_BACKOFF_MAX_S": "0.5",
            "PLNT_LOCAL_BACKEND_STOP_GRACE_S": "3",
            "PLNT_LOCAL_BACKEND_PROBE_INTERVAL_S": "0.05",
            **env_overrides,
        }
        log_path = tmp_path / f"local-backend-{len(spawned)}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "plnt_local_backend"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        service = ServiceProcess(process=process, log_path=log_path)
        spawned.append(service)
        return service

    yield spawn
    for service in spawned:
        if service.process.poll() is None:
            service.kill()
    kill_leftovers(data_dir)
