"""PLNT_EVENTS stays within PLNT_EVENTS_MAX_BYTES while sagas keep running: the oldest
events go (discard old), every publish still lands, and every saga still ends.

A soak in miniature: runs rolled out generation after generation on a real stack whose
event stream is given a small byte limit, its size sampled all along.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from stack_fixtures import start_stack
from stack_support import Client, backend_document, publish_spec, run_document, workflow_named

from plnt_cli.supervisor import Supervisor
from plnt_common import subjects
from plnt_common.bus.bus import Bus

LIMIT_BYTES = 48 * 1024
RUNS = 3
GENERATIONS = 6
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisor]:
    supervisor = start_stack(
        tmp_path_factory.mktemp("bounded"), env={"PLNT_EVENTS_MAX_BYTES": str(LIMIT_BYTES)}
    )
    yield supervisor
    supervisor.stop()


@pytest.fixture
async def client(stack: Supervisor) -> AsyncIterator[Client]:
    bus = await Bus.open(stack.config.nats_url, service="test", wait_for_server=True)
    test_client = Client(bus)
    await test_client.apply(backend_document())
    yield test_client
    await bus.close()


async def _sample_sizes(bus: Bus, sizes: list[int], stop: asyncio.Event) -> None:
    while not stop.is_set():
        sizes.append((await bus.js.stream_info(subjects.STREAM)).state.bytes)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.05)


async def test_the_event_stream_stays_within_its_byte_limit_and_every_saga_ends(
    client: Client, registry: Path
) -> None:
    info = await client.bus.js.stream_info(subjects.STREAM)
    assert info.config.max_bytes == LIMIT_BYTES, "the stack did not apply PLNT_EVENTS_MAX_BYTES"
    names = [f"bounded-{i}" for i in range(RUNS)]
    for name in names:
        publish_spec(registry, workflow_named(name))

    sizes: list[int] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(_sample_sizes(client.bus, sizes, stop))
    try:
        for generation in range(1, GENERATIONS + 1):
            # each generation changes the spec, so each is a saga of its own
            documents = [
                run_document(name, registry=registry, smoke_invocations=generation)
                for name in names
            ]
            await asyncio.gather(*(client.apply(document) for document in documents))
            await asyncio.gather(
                *(
                    client.wait_phase(name, "Ready", generation=generation, timeout_s=120)
                    for name in names
                )
            )
    finally:
        stop.set()
        await sampler

    state = (await client.bus.js.stream_info(subjects.STREAM)).state
    assert state.first_seq > 1, (
        f"nothing was removed: {state.bytes} bytes of {LIMIT_BYTES} after "
        f"{RUNS * GENERATIONS} sagas, so this soak did not reach the limit"
    )
    assert max(sizes) <= LIMIT_BYTES, f"the stream grew to {max(sizes)} bytes"
    for name in names:
        status = await client.status(name)
        assert status["phase"] == "Ready"
        assert status["revision"] == f"1.0.0-g{GENERATIONS}"
