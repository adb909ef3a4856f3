"""Wiring of the local-backend process: bus, health probe, desired watch, reconciler, owner watch.

``run`` reconciles ``plnt-releases`` into runner processes until ``stop`` is set, then
exits WITHOUT stopping runners (a restarted local-backend adopts them; ``plnt up`` stops
them at the very end with ``stop_all_runners``). When the owner pid is configured and
disappears (``plnt up`` killed with -9), it stops every runner itself and exits, so
nothing is orphaned. ``main`` is what ``plnt serve local-backend`` calls. No decisions
live here.
"""

import asyncio
import contextlib

from plnt_common.bus.bus import Bus
from plnt_common.logs import get_logger
from plnt_common.runtime import run_service
from plnt_local_backend.adapters.desired_watch import DesiredWatch
from plnt_local_backend.adapters.health import HealthProbe
from plnt_local_backend.adapters.processes import stop_all_runners, wait_until_gone
from plnt_local_backend.adapters.release_store import ReleaseStore
from plnt_local_backend.reconciler import Reconciler
from plnt_local_backend.settings import LocalBackendSettings

SERVICE = "local-backend"

HEALTH_TIMEOUT_S = 1.0
"""One /healthz request; a runner slower than that to answer is not ready yet."""

log = get_logger(__name__)


async def run(settings: LocalBackendSettings, stop: asyncio.Event) -> None:
    """Supervise runners until ``stop`` is set (runners survive) or the owner pid is gone
    (runners are stopped)."""
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    owner_gone = asyncio.Event()
    owner_task = (
        asyncio.create_task(_watch_owner(settings.owner_pid, owner_gone))
        if settings.owner_pid
        else None
    )
    ended = asyncio.Event()
    relay = asyncio.create_task(_first_of(stop, owner_gone, into=ended))
    try:
        bus = await _open_bus(settings, ended)
        if bus is not None:
            try:
                await _reconcile_until(settings, bus, ended)
            finally:
                await bus.close()
        if owner_gone.is_set():
            stopped = await asyncio.to_thread(
                stop_all_runners,
                settings.state_dir,
                grace_s=settings.stop_grace_s,
                every_backend=False,  # its own runners only: the other backends' stay up
            )
            log.warning("local_backend.owner_gone", owner_pid=settings.owner_pid, stopped=stopped)
    finally:
        for task in (relay, owner_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


async def _reconcile_until(settings: LocalBackendSettings, bus: Bus, ended: asyncio.Event) -> None:
    store = ReleaseStore(nc=bus.nc, releases=bus.releases, specs=bus.specs)
    async with HealthProbe(timeout_s=HEALTH_TIMEOUT_S) as probe:
        reconciler = Reconciler(settings=settings, store=store, probe=probe)
        watch = asyncio.create_task(
            DesiredWatch(nc=bus.nc, kv=bus.releases, sink=reconciler).run(),
            name="plnt-local-backend-desired-watch",
        )
        log.info(
            "local_backend.reconciling",
            data_dir=str(settings.state_dir),
            backend=settings.backend or "(every backend)",
        )
        try:
            await ended.wait()
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
            # Cancelling supervisors leaves runners running: they are adopted next time.
            await reconciler.detach()
            log.info("local_backend.detached")


async def _open_bus(settings: LocalBackendSettings, ended: asyncio.Event) -> Bus | None:
    """Connect (waiting for NATS as long as it takes); None when told to stop first."""
    opening = asyncio.create_task(
        Bus.open(settings.nats_url, service=SERVICE, wait_for_server=True)
    )
    waiting = asyncio.create_task(ended.wait())
    await asyncio.wait({opening, waiting}, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if opening.done():
        return opening.result()
    opening.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await opening
    return None


async def _watch_owner(owner_pid: int, gone: asyncio.Event) -> None:
    await wait_until_gone(owner_pid)
    gone.set()


async def _first_of(*events: asyncio.Event, into: asyncio.Event) -> None:
    waits = [asyncio.create_task(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        into.set()
    finally:
        for task in waits:
            task.cancel()


def main() -> None:
    """Entry point of ``plnt serve local-backend``: settings from the environment."""
    settings = LocalBackendSettings()
    run_service(SERVICE, settings, lambda stop: run(settings, stop))
