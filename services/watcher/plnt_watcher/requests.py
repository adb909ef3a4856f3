"""Operator requests by annotation: plnt.work/promote, plnt.work/abort, plnt.work/rollback.

``plnt promote|abort|rollback`` and ``kubectl annotate`` both set the annotation; a
metadata change (generation unchanged) brings it here. Each is checked against the run's
projection (``operations.refusal``), published as its request event under the run's
current saga (for a rollback, the Ready saga) with a ``Nats-Msg-Id`` that keeps one event
per annotation value, then removed. A refused annotation is removed too: the refusal is
logged and, on Kubernetes, recorded as an Event on the run (the status message stays the
saga's).
"""

import hashlib
from datetime import UTC, datetime
from typing import Any

from plnt_common.bus import saga_tracing
from plnt_common.bus.bus import Bus
from plnt_common.events import OperatorRequest, new_event
from plnt_common.logs import get_logger
from plnt_common.operations import FULL, Operation, refusal, requested
from plnt_common.resources import Rollback
from plnt_watcher.adapters.projections import ProjectionStore
from plnt_watcher.handlers import SERVICE
from plnt_watcher.ports import ResourceSource

log = get_logger(__name__)


def annotations_of(body: dict[str, Any]) -> dict[str, str]:
    return dict((body.get("metadata") or {}).get("annotations") or {})


def asks_for_operation(body: dict[str, Any]) -> bool:
    return bool(requested(annotations_of(body)))


def keep_previous_s(body: dict[str, Any]) -> float:
    """spec.rollback.keepPreviousFor in seconds, 0 when unset (read leniently: the spec is
    validated elsewhere)."""
    rollback = (body.get("spec") or {}).get("rollback") or {}
    try:
        return Rollback.model_validate(rollback).keep_previous_s
    except ValueError:
        return 0.0


def dedupe_key(value: str) -> str:
    """The annotation value as a message-id part: the same value is one request."""
    return hashlib.sha256(value.encode()).hexdigest()[:16]


class OperatorRequests:
    def __init__(self, *, bus: Bus, source: ResourceSource, projections: ProjectionStore) -> None:
        self._bus = bus
        self._source = source
        self._projections = projections

    async def handle(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        """Publish or refuse each requested operation, then remove the annotations."""
        asked = requested(annotations_of(body))
        projection = await self._projections.get(namespace=namespace, name=name)
        for operation, value in asked:
            by = f"{operation.annotation}={value}"
            refused = refusal(
                operation,
                projection,
                name=name,
                full=value == FULL,
                keep_previous_s=keep_previous_s(body),
                now=datetime.now(UTC),
            )
            if refused or projection is None:
                log.warning("request.refused", namespace=namespace, name=name, reason=refused)
                await self._source.request_refused(run=body, message=f"{by}: {refused}")
                continue
            event = new_event(
                operation.event_type,
                OperatorRequest(by=by, full=operation is Operation.PROMOTE and value == FULL),
                namespace=namespace,
                name=name,
                sagaid=projection.saga_id,
                generation=projection.generation,
                source=SERVICE,
            )
            with saga_tracing.continuing(projection.saga_traceparent):
                published = await self._bus.publish(event, step=dedupe_key(value))
            if published:
                log.info("request.published", request=operation.value, sagaid=event.sagaid, by=by)
        await self._source.remove_annotations(
            namespace=namespace, name=name, keys=tuple(op.annotation for op, _ in asked)
        )
