"""Watcher wiring: the resource source, the projection's FastStream app, the deadline loop.

With the Kubernetes source and leader election on, only the Lease holder runs the
resource loop (so two replicas start each saga once); every replica folds events into
the projection, writes status and checks deadlines.
"""

import asyncio
from collections.abc import Coroutine
from typing import Any

from plnt_common import subjects, tracing
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec
from plnt_common.bus.service_app import service_app
from plnt_common.events import EventType
from plnt_common.resource_store import ResourceStore
from plnt_common.runtime import run_service
from plnt_watcher.adapters.embedded_source import EmbeddedSource
from plnt_watcher.adapters.projections import ProjectionStore
from plnt_watcher.adapters.route_feed import route_entries
from plnt_watcher.handlers import SERVICE, ProjectionHandlers
from plnt_watcher.leader import LeaderElector
from plnt_watcher.loops import DeadlineLoop, ResourceLoop
from plnt_watcher.ports import ResourceSource
from plnt_watcher.replacement import ReplacementLoop
from plnt_watcher.serving import ServingLoop
from plnt_watcher.settings import WatcherSettings
from plnt_watcher.status_sync import ConvergingStatus

CONSUMES = (f"{subjects.SUBJECT_PREFIX}.>",)
"""Every event: the projection folds the whole saga."""
EMITS = (EventType.RUN_REQUESTED, EventType.RUN_DELETED, EventType.STEP_TIMED_OUT)


def consumer_spec(settings: WatcherSettings) -> ConsumerSpec:
    # Events of one run fold in stream order, runs in parallel; replicas share the
    # durable consumer and compare-and-set keeps their writes consistent.
    return ConsumerSpec(
        service=SERVICE,
        filters=CONSUMES,
        concurrency=settings.concurrency,
        ordered_by_run=True,
    )


def build_source(settings: WatcherSettings, bus: Bus) -> ResourceSource:
    if settings.source == "kubernetes":
        # Imported here so the embedded mode never loads the Kubernetes client.
        from plnt_watcher.adapters.kube_api import connect
        from plnt_watcher.adapters.kube_events import EventRecorder
        from plnt_watcher.adapters.kubernetes_source import KubernetesSource

        api = connect(
            kubeconfig=settings.kubeconfig,
            context=settings.kube_context,
            user_agent=f"plnt-watcher/{settings.identity()}",
        )
        recorder = (
            EventRecorder(
                api=api,
                instance=settings.identity(),
                request_timeout_s=settings.kube_request_timeout_s,
            )
            if settings.kube_events
            else None
        )
        return KubernetesSource(
            api=api,
            namespace=settings.kube_namespace,
            watch_timeout_s=settings.kube_watch_timeout_s,
            request_timeout_s=settings.kube_request_timeout_s,
            recorder=recorder,
            list_page_size=settings.kube_list_page_size,
        )
    return EmbeddedSource(ResourceStore(bus))


def build_elector(settings: WatcherSettings) -> LeaderElector | None:
    """The Lease elector in Kubernetes mode; None when every replica runs the loop."""
    if settings.source != "kubernetes" or not settings.leader_election:
        return None
    from plnt_watcher.adapters.kube_api import connect
    from plnt_watcher.adapters.lease import KubernetesLeaseStore

    # Its own client (and connection pool): renewals never queue behind a busy source.
    api = connect(
        kubeconfig=settings.kubeconfig,
        context=settings.kube_context,
        user_agent=f"plnt-watcher/{settings.identity()}",
    )
    return LeaderElector(
        store=KubernetesLeaseStore(
            api=api,
            name=settings.lease_name,
            namespace=settings.lease_namespace,
            request_timeout_s=settings.kube_request_timeout_s,
        ),
        identity=settings.identity(),
        lease_duration_s=settings.lease_duration_s,
        renew_deadline_s=settings.lease_renew_deadline_s,
        retry_period_s=settings.lease_retry_period_s,
    )


def resource_loop(
    resources: ResourceLoop, elector: LeaderElector | None, stop: asyncio.Event
) -> Coroutine[Any, Any, None]:
    """The resource loop itself, or the elector running it while this replica leads."""
    if elector is None:
        return resources.run(stop)
    return elector.run(stop, lambda: resources.run(stop))


async def run(settings: WatcherSettings, stop: asyncio.Event) -> None:
    bus = await Bus.open(settings.nats_url, service=SERVICE, wait_for_server=True)
    projections = ProjectionStore(bus.runs, reconnects=bus.reconnects)
    serving = ServingLoop(feed=lambda: route_entries(bus.routes, reconnects=bus.reconnects))
    # Replicas fold in parallel: status writes re-check the projection so the newest wins.
    source = ConvergingStatus(
        source=build_source(settings, bus), projections=projections, serving=serving.lookup
    )
    elector = build_elector(settings)
    handlers = ProjectionHandlers(
        bus=bus,
        projections=projections,
        source=source,
        status_linger_s=settings.status_linger_s,
    )
    app = service_app(bus, consumer_spec(settings), emits=EMITS, handlers=handlers)
    resources = ResourceLoop(bus=bus, source=source, projections=projections)
    deadlines = DeadlineLoop(
        bus=bus,
        projections=projections,
        deadlines=settings.deadlines(),
        interval_s=settings.deadline_check_interval_s,
    )
    replacements = ReplacementLoop(
        bus=bus,
        projections=projections,
        serving=serving.known,
        lost_after_s=settings.replace_lost_after_s,
    )
    background = [
        asyncio.create_task(resource_loop(resources, elector, stop)),
        asyncio.create_task(deadlines.run(stop)),
        asyncio.create_task(serving.run(stop, refresh=source.refresh)),
        asyncio.create_task(replacements.run(stop)),
    ]
    try:
        await app.run(stop)
    finally:
        if elector is not None:
            # The elector sees ``stop`` and releases its Lease; give it a moment to do so
            # before cancelling, so a follower takes over at once instead of after expiry.
            await asyncio.wait(background[:1], timeout=5)
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await bus.close()


def main() -> None:
    settings = WatcherSettings()
    tracing.setup_or_exit(SERVICE)  # OTEL_EXPORTER_OTLP_ENDPOINT unset: nothing installed
    run_service(SERVICE, settings, lambda stop: run(settings, stop))
