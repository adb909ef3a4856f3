"""The smoke step against a real nats-server and a real HTTP runner: verdicts by saga state."""

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.bus.history import read_events
from plnt_common.bus.saga import advance_latest_saga
from plnt_common.events import (
    CanaryInstalled,
    CanaryRef,
    Envelope,
    EventType,
    RunFailed,
    RunSnapshot,
    follow_up,
    saga_id,
)
from plnt_common.resources import WorkflowRunSpec
from plnt_common.status import Phase, Reason
from plnt_common.testing.events import run_requested
from plnt_smoke.adapters.harness import SmokeHarness
from plnt_smoke.handlers import SmokeHandlers

DELIVERY = Delivery(msg=None, attempt=1)  # type: ignore[arg-type]


class Runner:
    """A canary's ``POST /invoke``: counts calls; answers only once ``open`` is set."""

    def __init__(self) -> None:
        self.calls = 0
        self.open = asyncio.Event()

    async def invoke(self, request: web.Request) -> web.Response:
        self.calls += 1
        await self.open.wait()
        return web.json_response({"output": "ok"})


@pytest.fixture
async def runner() -> AsyncIterator[tuple[Runner, str]]:
    runner = Runner()
    app = web.Application()
    app.router.add_post("/invoke", runner.invoke)
    async with TestServer(app, host="127.0.0.1") as server:
        yield runner, str(server.make_url("")).rstrip("/")


def installed(name: str, url: str, *, generation: int = 1) -> Envelope:
    spec = WorkflowRunSpec.model_validate(
        {
            "workflow": {"ref": "wf@1.0.0", "registry": "file:///registry"},
            "backend": {"cluster": "c"},
            "smokeTest": {"invocations": 3},
        }
    )
    run = RunSnapshot(namespace="default", name=name, generation=generation, spec=spec)
    canary = CanaryRef(revision="1.0.0-g1", release=f"{name}-g1", url=url)
    return follow_up(
        run_requested(run),
        EventType.CANARY_INSTALLED,
        CanaryInstalled(run=run, canary=canary),
        source="test",
    )


async def smoke_events(bus: Bus, name: str) -> list[EventType]:
    return [
        stored.event.event_type
        async for stored in read_events(bus.nc, filter_subject=subjects.run_filter("default", name))
        if stored.event is not None and stored.event.event_type.value.startswith("smoke")
    ]


async def handle(bus: Bus, event: Envelope) -> None:
    async with SmokeHarness(request_timeout_s=5) as harness:
        handlers = SmokeHandlers(bus=bus, harness=harness, concurrency=2)
        await asyncio.wait_for(handlers.handle(event, DELIVERY), timeout=5)


async def test_a_current_saga_is_invoked_and_passes(
    nats_url: str, runner: tuple[Runner, str]
) -> None:
    fake, url = runner
    fake.open.set()
    bus = await Bus.open(nats_url, service="test")
    event = installed("current", url)
    await advance_latest_saga(bus, "default", "current", event.sagaid)
    await handle(bus, event)
    assert fake.calls == 3
    assert await smoke_events(bus, "current") == [EventType.SMOKE_PASSED]
    await bus.close()


async def test_an_ended_saga_stops_its_invocations_and_publishes_nothing(
    nats_url: str, runner: tuple[Runner, str]
) -> None:
    _, url = runner  # never answers: waiting for the invocations would time out
    bus = await Bus.open(nats_url, service="test")
    event = installed("ended", url)
    failed = RunFailed(reason=Reason.INSTALL_FAILED, message="gone", phase=Phase.INSTALLING)
    assert await bus.publish_terminal(follow_up(event, EventType.RUN_FAILED, failed, source="t"))
    await handle(bus, event)
    assert await smoke_events(bus, "ended") == []
    await bus.close()


async def test_a_superseded_saga_fails_its_smoke_without_waiting_for_invocations(
    nats_url: str, runner: tuple[Runner, str]
) -> None:
    _, url = runner  # never answers
    bus = await Bus.open(nats_url, service="test")
    event = installed("old", url)
    await advance_latest_saga(bus, "default", "old", saga_id("default", "old", 2))
    await handle(bus, event)
    assert await smoke_events(bus, "old") == [EventType.SMOKE_FAILED]
    await bus.close()
