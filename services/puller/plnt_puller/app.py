"""Wiring of the puller process: bus, adapters, its FastStream app, start and stop.

``run`` consumes until ``stop`` is set (tests run it as a task); ``main`` is what
``plnt serve puller`` and ``python -m plnt_puller`` call. No pull logic lives here.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from plnt_common import subjects, tracing
from plnt_common.backend_catalog import BackendCatalog, StoredBackends
from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import ConsumerSpec
from plnt_common.bus.service_app import service_app
from plnt_common.events import EventType
from plnt_common.oci import OciClient, docker_config_file
from plnt_common.resource_store import ResourceStore
from plnt_common.runtime import run_service
from plnt_puller.adapters.file_registry import FileRegistry
from plnt_puller.adapters.oci_registry import OciRegistry
from plnt_puller.adapters.registries import RegistryByScheme
from plnt_puller.adapters.s3_registry import S3Registry
from plnt_puller.adapters.spec_store import ObjectStoreSpecs
from plnt_puller.handlers import PullHandler
from plnt_puller.ports import NamespaceLabels, PullSecrets, Registry
from plnt_puller.settings import PullerSettings

SERVICE = "puller"
CONSUMES = (EventType.RUN_REQUESTED,)
EMITS = (EventType.SPEC_PULLED, EventType.RUN_FAILED)


def build_registry(settings: PullerSettings) -> Registry:
    """Every registry scheme the puller serves, configured from ``settings``."""
    return RegistryByScheme(
        adapters={
            "file": FileRegistry(),
            "s3": S3Registry(
                endpoint_url=settings.s3_endpoint_url,
                region=settings.s3_region,
                max_attempts=settings.s3_max_attempts,
                connect_timeout_s=settings.connect_timeout_s,
                read_timeout_s=settings.read_timeout_s,
                max_connections=settings.concurrency,
            ),
            "oci": OciRegistry(client=oci_client(settings)),
        }
    )


def oci_client(settings: PullerSettings) -> OciClient:
    """The OCI registry client ``settings`` describe (also what ``plnt publish`` uses)."""
    return OciClient(
        insecure=settings.oci_insecure_registries,
        docker_config=docker_config_file(settings.oci_docker_config, home=Path.home()),
        attempts=settings.oci_max_attempts,
        connect_timeout_s=settings.connect_timeout_s,
        read_timeout_s=settings.read_timeout_s,
    )


@contextlib.asynccontextmanager
async def kubernetes_reads(
    settings: PullerSettings,
) -> AsyncIterator[tuple[BackendCatalog, PullSecrets, NamespaceLabels] | None]:
    """With ``backends=kubernetes``: the PlntBackend, pull-secret and namespace-label
    readers, one API client between them, closed on exit; None in the embedded mode (no
    Kubernetes).

    Raises ``KubernetesUnavailable`` when the Kubernetes API is chosen and neither a
    kubeconfig nor a service account is found, so a misconfigured puller stops at start-up.
    """
    if settings.backends != "kubernetes":
        yield None
        return
    # Imported here so the embedded mode never loads the Kubernetes client.
    from plnt_common.kube import PlntBackendReader, api_client
    from plnt_puller.adapters.namespaces import KubeNamespaceLabels
    from plnt_puller.adapters.pull_secrets import KubePullSecrets

    api = api_client(kubeconfig=settings.kubeconfig, user_agent=f"plnt-{SERVICE}")
    reader = PlntBackendReader(api=api)
    try:
        yield reader, KubePullSecrets(api=api), KubeNamespaceLabels(api=api)
    finally:
        await reader.close()


def consumer_spec(settings: PullerSettings) -> ConsumerSpec:
    return ConsumerSpec(
        service=SERVICE,
        filters=tuple(subjects.event_filter(t) for t in CONSUMES),
        concurrency=settings.concurrency,
        max_attempts=settings.max_attempts,
        backoff_s=settings.retry_backoff_s,
    )


async def run(settings: PullerSettings, stop: asyncio.Event) -> None:
    """Pull specs until ``stop`` is set; in-flight pulls finish and ack before return."""
    bus = await Bus.open(settings.nats_url, service=SERVICE, wait_for_server=True)
    try:
        async with kubernetes_reads(settings) as reads:
            backends = reads[0] if reads is not None else StoredBackends(store=ResourceStore(bus))
            handler = PullHandler(
                bus=bus,
                registry=build_registry(settings),
                backends=backends,
                specs=ObjectStoreSpecs(js=bus.js),
                max_attempts=settings.max_attempts,
                pull_secrets=reads[1] if reads is not None else None,
                namespaces=reads[2] if reads is not None else None,
            )
            app = service_app(bus, consumer_spec(settings), emits=EMITS, handlers=handler)
            await app.run(stop)
    finally:
        await bus.close()


def main() -> None:
    """Run the puller until SIGTERM/SIGINT, configured from ``PLNT_*`` variables."""
    settings = PullerSettings()

    async def body(stop: asyncio.Event) -> None:
        await run(settings, stop)

    tracing.setup_or_exit(SERVICE)  # OTEL_EXPORTER_OTLP_ENDPOINT unset: nothing installed
    run_service(SERVICE, settings, body)
