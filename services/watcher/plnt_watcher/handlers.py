"""Watcher handlers: fold events into the projection and reflect it on the resource."""

from plnt_common.bus.bus import Bus
from plnt_common.bus.consumer import Delivery
from plnt_common.events import Envelope
from plnt_common.logs import get_logger
from plnt_common.metrics import DEPLOY_DURATION
from plnt_watcher.adapters.projections import ProjectionStore
from plnt_watcher.logic import FINALIZER, status_document
from plnt_watcher.status_sync import ConvergingStatus

log = get_logger(__name__)
SERVICE = "watcher"


class ProjectionHandlers:
    def __init__(
        self,
        *,
        bus: Bus,
        projections: ProjectionStore,
        source: ConvergingStatus,
        status_linger_s: float = 0.0,
    ) -> None:
        self._bus = bus
        self._projections = projections
        self._source = source
        self._status_linger_s = status_linger_s

    async def handle(self, event: Envelope, delivery: Delivery) -> None:
        projection, changed, revision = await self._projections.fold(event)
        if projection is None:
            log.info("event.no_projection", reason="stale event of a removed run")
            return
        if changed and event.event_type.is_terminal and projection.requested_at:
            seconds = (event.time - projection.requested_at).total_seconds()
            DEPLOY_DURATION.labels(event.event_type.value).observe(max(0.0, seconds))
        if projection.removed:
            await self._source.release_finalizer(
                namespace=event.namespace, name=event.name, finalizer=FINALIZER
            )
            await self._projections.delete(namespace=event.namespace, name=event.name)
            log.info("run.finalized")
            return
        # A step's status stands for a few milliseconds when the saga moves on at once:
        # when the run's next event arrives here meanwhile, its delivery writes the status
        # folded from both, and this write (a resource update and its echoes) is saved.
        # An end is written at once. The delivery is held until then, so a crash loses
        # no write: the event comes back.
        linger = 0.0 if event.event_type.is_terminal else self._status_linger_s
        if await delivery.successor_within(linger):
            return
        # Written even when this delivery changed nothing: an earlier delivery may have
        # folded the event and then failed to write the status (that is why it came back).
        await self._source.write_folded(
            namespace=event.namespace,
            name=event.name,
            status=status_document(projection),
            revision=revision,
        )

    async def on_exhausted(self, event: Envelope, exc: BaseException) -> None:
        """The projection could not take this event: say so loudly; the stream keeps it."""
        log.error("projection.event_dropped", error=str(exc))
