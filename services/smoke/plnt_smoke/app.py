"""Smoke wiring: bus, harness, one durable consumer on canary.installed."""

import asyncio

from plnt_common import subjects
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec, EventConsumer
from plnt_common.events import EventType
from plnt_common.runtime import run_service
from plnt_smoke.adapters.embeddings import SentenceEmbedder
from plnt_smoke.adapters.harness import SmokeHarness
from plnt_smoke.handlers import SERVICE, SmokeHandlers
from plnt_smoke.settings import SmokeSettings


async def run(settings: SmokeSettings, stop: asyncio.Event) -> None:
    bus = await Bus.open(settings.nats_url, service=SERVICE, wait_for_server=True)
    spec = ConsumerSpec(
        service=SERVICE,
        filters=(subjects.event_filter(EventType.CANARY_INSTALLED),),
        concurrency=settings.sagas,
    )
    try:
        async with SmokeHarness(request_timeout_s=settings.request_timeout_s) as harness:
            handlers = SmokeHandlers(
                bus=bus,
                harness=harness,
                scorer=SentenceEmbedder(),
                concurrency=settings.concurrency,
            )
            await EventConsumer(bus, spec, handlers.handle, handlers.on_exhausted).run(stop)
    finally:
        await bus.close()


def main() -> None:
    settings = SmokeSettings()
    run_service(SERVICE, settings, lambda stop: run(settings, stop))
