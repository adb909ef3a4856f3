"""Installer wiring: bus, release backends, its FastStream app, the Helm observer."""

import asyncio
from collections.abc import Callable

from plnt_common import subjects, tracing
from plnt_common.backend_catalog import BackendCatalog, KubernetesOnly, StoredBackends
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec
from plnt_common.bus.service_app import service_app
from plnt_common.events import EventType
from plnt_common.kube import PlntBackendReader, api_client
from plnt_common.resource_store import ResourceStore
from plnt_common.runtime import run_service
from plnt_installer.adapters.backend_status import KubeBackendStatus
from plnt_installer.adapters.capacity_sources import KubeCapacitySource, LocalCapacitySource
from plnt_installer.adapters.capacity_store import CapacityStore
from plnt_installer.adapters.helm.backend import HelmReleaseBackend
from plnt_installer.adapters.kube_access import KubeConnector
from plnt_installer.adapters.kube_observations import KubeObservations
from plnt_installer.adapters.local_releases import LocalReleaseBackend
from plnt_installer.adapters.runner_probe import HttpRunnerProbe
from plnt_installer.adapters.spec_source import ObjectStoreSpecSource
from plnt_installer.handlers import SERVICE, InstallerHandlers
from plnt_installer.helm_observer import HelmObserver
from plnt_installer.kube_ports import KubernetesTargets
from plnt_installer.placement import CapacityObserver, Placements
from plnt_installer.ports import ReleaseBackend
from plnt_installer.settings import InstallerSettings

CONSUMES = (
    EventType.SPEC_PULLED,
    EventType.ANALYSIS_PASSED,
    EventType.INSTALL_FAILED,
    EventType.ROUTE_RESTORED,
    EventType.STEP_TIMED_OUT,
    EventType.RUN_READY,
    EventType.RUN_REVERTED,
    EventType.RUN_DELETED,
)
EMITS = (
    EventType.CANARY_INSTALLED,
    EventType.CAPACITY_AWAITED,
    EventType.BACKEND_AWAITED,
    EventType.INSTALL_FAILED,
    EventType.RUN_FAILED,
    EventType.RUN_ROLLED_BACK,
    EventType.RUN_REMOVED,
)


BackendsFactory = Callable[[Bus, InstallerSettings], dict[str, ReleaseBackend]]


def build_catalog(bus: Bus, settings: InstallerSettings) -> BackendCatalog:
    """Every PlntBackend, from where ``settings.backends`` says they are kept."""
    if settings.backends == "kubernetes":
        api = api_client(kubeconfig=settings.kubeconfig, user_agent=f"plnt-{SERVICE}")
        return PlntBackendReader(api=api)
    return StoredBackends(store=ResourceStore(bus))


async def build_placements(bus: Bus) -> Placements:
    """Capacity per backend type, kept in ``plnt-capacity``."""
    kv = await bus.js.key_value(subjects.CAPACITY_BUCKET)
    return Placements(
        sources={
            "local": LocalCapacitySource(nc=bus.nc),
            "kubernetes": KubeCapacitySource(connector=KubeConnector()),
        },
        book=CapacityStore(kv),
    )


def build_status_writer(settings: InstallerSettings) -> KubeBackendStatus | None:
    """PlntBackends on the Kubernetes API get ``status.capacity``; the embedded store's
    are shown from ``plnt-capacity`` by ``plnt get backends``."""
    if settings.backends != "kubernetes":
        return None
    api = api_client(kubeconfig=settings.kubeconfig, user_agent=f"plnt-{SERVICE}")
    return KubeBackendStatus(api=api)


def build_targets(bus: Bus, settings: InstallerSettings) -> KubernetesTargets:
    """Where the Helm backend lists kubernetes PlntBackends, as ``settings.backends`` says.

    Raises ``KubernetesUnavailable`` when the Kubernetes API is chosen and neither a
    kubeconfig nor a service account is found, so a misconfigured installer stops at
    start-up. The client sends nothing until the first list.
    """
    return KubernetesOnly(build_catalog(bus, settings))


def default_backends(bus: Bus, settings: InstallerSettings) -> dict[str, ReleaseBackend]:
    """Release backends by PlntBackend ``spec.type``.

    The kubernetes one touches no cluster and runs no ``helm`` until a kubernetes
    PlntBackend is used, so the embedded mode needs neither.
    """
    return {
        "local": LocalReleaseBackend(bus),
        "kubernetes": HelmReleaseBackend(
            targets=build_targets(bus, settings),
            specs=ObjectStoreSpecSource(store=bus.specs),
            connector=KubeConnector(),
            chart=settings.runner_chart,
        ),
    }


def consumer_spec(settings: InstallerSettings) -> ConsumerSpec:
    return ConsumerSpec(
        service=SERVICE,
        filters=tuple(subjects.event_filter(t) for t in CONSUMES),
        concurrency=settings.concurrency,
        # an install waits for readiness; heartbeats keep it, this bounds a dead replica
        ack_wait_s=30.0,
    )


async def run(
    settings: InstallerSettings,
    stop: asyncio.Event,
    *,
    backends_factory: BackendsFactory = default_backends,
) -> None:
    """Consume until ``stop``; ``backends_factory`` lets a benchmark bring its own backend."""
    bus = await Bus.open(settings.nats_url, service=SERVICE, wait_for_server=True)
    try:
        # inside the try: a backend that cannot be built (no Kubernetes credentials)
        # still lets the connection drain
        placements = await build_placements(bus)
        handlers = InstallerHandlers(
            bus=bus,
            backends=backends_factory(bus, settings),
            ready_timeout_s=settings.ready_timeout_s,
            uninstall_timeout_s=settings.uninstall_timeout_s,
            placements=placements,
            capacity_retry_s=settings.capacity_retry_s,
        )
        capacity_observer = CapacityObserver(
            catalog=build_catalog(bus, settings),
            placements=placements,
            interval_s=settings.capacity_interval_s,
            status=build_status_writer(settings),
        )
        observer = HelmObserver(
            targets=build_targets(bus, settings),
            connector=KubeConnector(),
            store=KubeObservations(nc=bus.nc, kv=bus.releases),
            probe=HttpRunnerProbe(),
            unreachable_after_s=settings.backend_unreachable_after_s,
        )
        observing = [
            asyncio.create_task(observer.run(stop)),
            asyncio.create_task(capacity_observer.run(stop)),
        ]
        try:
            app = service_app(bus, consumer_spec(settings), emits=EMITS, handlers=handlers)
            await app.run(stop)
        finally:
            for task in observing:
                task.cancel()
            await asyncio.gather(*observing, return_exceptions=True)
    finally:
        await bus.close()


def main() -> None:
    settings = InstallerSettings()
    tracing.setup_or_exit(SERVICE)  # OTEL_EXPORTER_OTLP_ENDPOINT unset: nothing installed
    run_service(SERVICE, settings, lambda stop: run(settings, stop))
