"""Promoter wiring: bus, route table, live figures, its FastStream app, the route follower."""

import asyncio

from plnt_common import subjects, tracing
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec
from plnt_common.bus.service_app import service_app
from plnt_common.events import EventType
from plnt_common.runtime import run_service
from plnt_promoter.adapters.figures_source import open_figures
from plnt_promoter.adapters.route_table import RouteTable
from plnt_promoter.handlers import SERVICE, PromoterHandlers
from plnt_promoter.route_follow import RouteFollower
from plnt_promoter.settings import PromoterSettings

CONSUMES = (
    EventType.CANARY_INSTALLED,
    EventType.INSTALL_FAILED,
    EventType.SMOKE_PASSED,
    EventType.SMOKE_FAILED,
    EventType.SHADOW_STARTED,
    EventType.SHADOW_PASSED,
    EventType.SHADOW_FAILED,
    EventType.CANARY_STEPPED,
    EventType.ANALYSIS_PASSED,
    EventType.ANALYSIS_FAILED,
    EventType.STEP_TIMED_OUT,
    EventType.PROMOTE_REQUESTED,
    EventType.ABORT_REQUESTED,
    EventType.RUN_READY,
    EventType.ROLLBACK_REQUESTED,
    EventType.RUN_DELETED,
)
EMITS = (
    EventType.SHADOW_STARTED,
    EventType.SHADOW_CHECKED,
    EventType.SHADOW_PASSED,
    EventType.SHADOW_FAILED,
    EventType.CANARY_STEPPED,
    EventType.ANALYSIS_PASSED,
    EventType.ANALYSIS_FAILED,
    EventType.RUN_READY,
    EventType.ROUTE_RESTORED,
    EventType.RUN_REVERTED,
)


def consumer_spec(settings: PromoterSettings) -> ConsumerSpec:
    return ConsumerSpec(
        service=SERVICE,
        filters=tuple(subjects.event_filter(t) for t in CONSUMES),
        concurrency=settings.concurrency,
        # a run's route changes apply in stream order (a deletion after a routing)
        ordered_by_run=True,
    )


async def run(settings: PromoterSettings, stop: asyncio.Event) -> None:
    bus = await Bus.open(settings.nats_url, service=SERVICE, wait_for_server=True)
    routes = RouteTable(bus.routes)
    figures = await open_figures(settings=settings, nc=bus.nc)
    handlers = PromoterHandlers(
        bus=bus,
        routes=routes,
        public_url=settings.router_public_url,
        figures=figures,
        shadow_check_s=settings.shadow_check_s,
    )
    follower = RouteFollower(bus=bus, routes=routes, resync_s=settings.follow_resync_s)
    following = asyncio.create_task(follower.run(stop))
    try:
        app = service_app(bus, consumer_spec(settings), emits=EMITS, handlers=handlers)
        await app.run(stop)
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
        await figures.close()
        await bus.close()


def main() -> None:
    settings = PromoterSettings()
    tracing.setup_or_exit(SERVICE)  # OTEL_EXPORTER_OTLP_ENDPOINT unset: nothing installed
    run_service(SERVICE, settings, lambda stop: run(settings, stop))
