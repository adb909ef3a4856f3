"""Installer wiring: bus, release backends, one durable consumer."""

import asyncio

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec, EventConsumer
from plnt_common.events import EventType
from plnt_common.runtime import run_service
from plnt_installer.adapters.local_releases import LocalReleaseBackend
from plnt_installer.handlers import SERVICE, InstallerHandlers
from plnt_installer.ports import ReleaseBackend
from plnt_installer.settings import InstallerSettings

CONSUMES = (
    EventType.SPEC_PULLED,
    EventType.INSTALL_FAILED,
    EventType.ROUTE_RESTORED,
    EventType.STEP_TIMED_OUT,
    EventType.RUN_READY,
    EventType.RUN_DELETED,
)


async def run(settings: InstallerSettings, stop: asyncio.Event) -> None:
    bus = await Bus.open(settings.nats_url, service=SERVICE, wait_for_server=True)
    backends: dict[str, ReleaseBackend] = {"local": LocalReleaseBackend(bus)}
    handlers = InstallerHandlers(
        bus=bus,
        backends=backends,
        ready_timeout_s=settings.ready_timeout_s,
        uninstall_timeout_s=settings.uninstall_timeout_s,
    )
    spec = ConsumerSpec(
        service=SERVICE,
        filters=tuple(subjects.event_filter(t) for t in CONSUMES),
        concurrency=settings.concurrency,
        # an install waits for readiness; heartbeats keep it, this bounds a dead replica
        ack_wait_s=30.0,
    )
    try:
        await EventConsumer(bus, spec, handlers.handle, handlers.on_exhausted).run(stop)
    finally:
        await bus.close()


def main() -> None:
    settings = InstallerSettings()
    run_service(SERVICE, settings, lambda stop: run(settings, stop))
