"""Watcher wiring: the resource source, the projection consumer and the deadline loop."""

import asyncio

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec, EventConsumer
from plnt_common.resource_store import ResourceStore
from plnt_common.runtime import run_service
from plnt_watcher.adapters.embedded_source import EmbeddedSource
from plnt_watcher.adapters.projections import ProjectionStore
from plnt_watcher.handlers import SERVICE, ProjectionHandlers
from plnt_watcher.loops import DeadlineLoop, ResourceLoop
from plnt_watcher.ports import ResourceSource
from plnt_watcher.settings import WatcherSettings


def build_source(settings: WatcherSettings, bus: Bus) -> ResourceSource:
    if settings.source == "kubernetes":
        raise SystemExit(
            "PLNT_WATCHER_SOURCE=kubernetes is not available in this build yet; use embedded"
        )
    return EmbeddedSource(ResourceStore(bus.resources))


async def run(settings: WatcherSettings, stop: asyncio.Event) -> None:
    bus = await Bus.open(settings.nats_url, service=SERVICE, wait_for_server=True)
    source = build_source(settings, bus)
    projections = ProjectionStore(bus.runs)
    handlers = ProjectionHandlers(bus=bus, projections=projections, source=source)
    # One event at a time per replica keeps the fold in stream order; replicas share
    # the durable consumer and compare-and-set keeps their writes consistent.
    spec = ConsumerSpec(service=SERVICE, filters=(f"{subjects.SUBJECT_PREFIX}.>",), concurrency=1)
    consumer = EventConsumer(bus, spec, handlers.handle, handlers.on_exhausted)
    resources = ResourceLoop(bus=bus, source=source, projections=projections)
    deadlines = DeadlineLoop(
        bus=bus,
        projections=projections,
        deadlines=settings.deadlines(),
        interval_s=settings.deadline_check_interval_s,
    )
    background = [
        asyncio.create_task(resources.run(stop)),
        asyncio.create_task(deadlines.run(stop)),
    ]
    try:
        await consumer.run(stop)
    finally:
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await bus.close()


def main() -> None:
    settings = WatcherSettings()
    run_service(SERVICE, settings, lambda stop: run(settings, stop))
