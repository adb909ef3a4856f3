"""Pure watcher decisions: what a resource change asks for, when a step is overdue.

Imports no I/O library. ``ResourceFacts`` is what the source observed; the projection
is what the saga reported; the result says what to do, never how.
"""

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from plnt_common.projection import RunProjection
from plnt_common.status import Phase

FINALIZER = "plnt.work/saga"


@dataclass(frozen=True)
class ResourceFacts:
    namespace: str
    name: str
    uid: str
    generation: int
    finalizers: tuple[str, ...]
    deleting: bool

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> "ResourceFacts":
        meta = body["metadata"]
        return cls(
            namespace=meta.get("namespace") or "default",
            name=meta["name"],
            uid=meta.get("uid", ""),
            generation=int(meta.get("generation", 1)),
            finalizers=tuple(meta.get("finalizers") or ()),
            deleting=bool(meta.get("deletionTimestamp")),
        )


class Action(StrEnum):
    ADD_FINALIZER = "add-finalizer"
    WRITE_PENDING = "write-pending"
    REQUEST_SAGA = "request-saga"
    REQUEST_DELETION = "request-deletion"
    RELEASE_FINALIZER = "release-finalizer"


def decide(facts: ResourceFacts, projection: RunProjection | None) -> list[Action]:
    """The actions a resource's current state calls for, in order."""
    if facts.deleting:
        if projection is not None and projection.removed:
            return [Action.RELEASE_FINALIZER] if FINALIZER in facts.finalizers else []
        if projection is None or not projection.deleting:
            return [Action.REQUEST_DELETION]
        return []
    actions = []
    if FINALIZER not in facts.finalizers:
        actions.append(Action.ADD_FINALIZER)
    if projection is None or projection.generation < facts.generation:
        if projection is None:
            actions.append(Action.WRITE_PENDING)
        actions.append(Action.REQUEST_SAGA)
    return actions


def adopted(facts: ResourceFacts) -> bool:
    """The finalizer is on and no delete is pending: only a new generation needs a saga."""
    return FINALIZER in facts.finalizers and not facts.deleting


def settled(body: dict[str, Any]) -> bool:
    """The status already reflects this generation, the finalizer is on, no delete pending.

    Such a change (typically the watcher's own status write) calls for no action, so the
    projection need not be read.
    """
    meta = body["metadata"]
    status = body.get("status") or {}
    return (
        not meta.get("deletionTimestamp")
        and FINALIZER in (meta.get("finalizers") or ())
        and status.get("observedGeneration", 0) >= int(meta.get("generation", 1))
    )


def overdue_phase(
    projection: RunProjection, *, now: datetime, deadlines: dict[str, float]
) -> tuple[str, float] | None:
    """The phase and its deadline when the current saga step has run too long."""
    phase = projection.status.phase
    if phase is Phase.PAUSED:
        return None  # the manual gate waits for a person (plnt promote or abort), not a clock
    deadline = deadlines.get(phase.value)
    if deadline is not None and phase in (Phase.PROGRESSING, Phase.SHADOWING):
        deadline += projection.step_hold_s  # a step's (or shadow's) own length: its spec's
    if deadline is None or projection.phase_since is None or not projection.saga_active:
        return None
    if phase in (Phase.DELETING,) or projection.deleting:
        return None
    if (now - projection.phase_since).total_seconds() > deadline:
        return phase.value, deadline
    return None


def status_document(projection: RunProjection) -> dict[str, Any]:
    """The resource status as the Kubernetes API would show it; no ``traceId`` while the
    saga has no trace (tracing off)."""
    status = projection.status
    untraced = {"trace_id"} if status.trace_id is None else None
    return status.model_dump(mode="json", by_alias=True, exclude=untraced)
