"""Fixtures of a real embedded stack (nats-server plus every service as its own process).

Shared by tests/e2e and tests/faults through their conftest files.
"""

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from stack_support import Client, backend_document

from plnt_cli.supervisor import StackConfig, Supervisor
from plnt_cli.up import wait_until_ready
from plnt_common.bus.bus import Bus
from plnt_common.nats_server import free_ports

FAST_ENV = {
    "PLNT_WATCHER_DEADLINE_CHECK_INTERVAL_S": "0.5",
    "PLNT_INSTALLER_READY_TIMEOUT_S": "30",
    "PLNT_SMOKE_REQUEST_TIMEOUT_S": "10",
}


def start_stack(
    data_dir: Path,
    *,
    replicas: int = 1,
    env: dict[str, str] | None = None,
    ports: tuple[int, int] | None = None,
    say: Callable[[str], None] | None = None,
) -> Supervisor:
    """``ports``: NATS's and the router's, when chosen with others the stack will use;
    ``say``: what ``plnt up`` prints (default: printed with a prefix)."""
    nats_port, router_port = ports or free_ports(2)
    config = StackConfig(
        data_dir=data_dir,
        nats_port=nats_port,
        router_port=router_port,
        replicas=replicas,
        extra_env={**FAST_ENV, **(env or {})},
    )
    supervisor = Supervisor(config, say=say or (lambda line: print(f"[plnt up] {line}")))
    supervisor.start()
    try:
        asyncio.run(wait_until_ready(config, timeout_s=60))
    except BaseException:
        supervisor.stop()
        raise
    return supervisor


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisor]:
    supervisor = start_stack(tmp_path_factory.mktemp("stack"))
    yield supervisor
    supervisor.stop()


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    path = tmp_path / "registry"
    path.mkdir()
    return path


@pytest.fixture
async def client(stack: Supervisor) -> AsyncIterator[Client]:
    bus = await Bus.open(stack.config.nats_url, service="test", wait_for_server=True)
    test_client = Client(bus)
    await test_client.apply(backend_document())
    yield test_client
    await bus.close()
