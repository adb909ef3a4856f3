"""Smoke wiring: bus, harness, the FastStream app consuming canary.installed."""

import asyncio

from plnt_common import subjects, tracing
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec
from plnt_common.bus.service_app import service_app
from plnt_common.events import EventType
from plnt_common.runtime import run_service
from plnt_smoke.adapters.embeddings import SentenceEmbedder
from plnt_smoke.adapters.harness import SmokeHarness
from plnt_smoke.handlers import SERVICE, SmokeHandlers
from plnt_smoke.settings import SmokeSettings

CONSUMES = (EventType.CANARY_INSTALLED,)
EMITS = (EventType.SMOKE_PASSED, EventType.SMOKE_FAILED)


def consumer_spec(settings: SmokeSettings) -> ConsumerSpec:
    return ConsumerSpec(
        service=SERVICE,
        filters=tuple(subjects.event_filter(t) for t in CONSUMES),
        concurrency=settings.sagas,
    )


async def run(settings: SmokeSettings, stop: asyncio.Event) -> None:
    bus = await Bus.open(settings.nats_url, service=SERVICE, wait_for_server=True)
    try:
        async with SmokeHarness(request_timeout_s=settings.request_timeout_s) as harness:
            handlers = SmokeHandlers(
                bus=bus,
                harness=harness,
                scorer=SentenceEmbedder(),
                concurrency=settings.concurrency,
            )
            app = service_app(bus, consumer_spec(settings), emits=EMITS, handlers=handlers)
            await app.run(stop)
    finally:
        await bus.close()


def main() -> None:
    settings = SmokeSettings()
    tracing.setup_or_exit(SERVICE)  # OTEL_EXPORTER_OTLP_ENDPOINT unset: nothing installed
    run_service(SERVICE, settings, lambda stop: run(settings, stop))
