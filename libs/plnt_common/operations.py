"""Operator requests (promote, abort, rollback): their annotations and when each applies.

``plnt promote|abort|rollback`` and ``kubectl annotate`` take one path: an annotation on
the WorkflowRun, which the watcher turns into the request event. Both check a request
against the run's projection with ``refusal``, so the CLI refuses before it writes and
the watcher refuses what kubectl wrote, with the same words. Pure: no I/O.
"""

from collections.abc import Mapping
from datetime import datetime, timedelta
from enum import StrEnum

from plnt_common.events import EventType
from plnt_common.projection import RunProjection
from plnt_common.status import Phase

ANNOTATION_PREFIX = "plnt.work/"
FULL = "full"
"""The ``plnt.work/promote`` value that skips the remaining steps (``--full``)."""
ABORTABLE = frozenset({Phase.SMOKING, Phase.SHADOWING, Phase.PROGRESSING, Phase.PAUSED})
SKIPPABLE = frozenset({Phase.SHADOWING, Phase.PROGRESSING})
"""Phases ``promote --full`` ends early: the shadow phase, the steps."""


class Operation(StrEnum):
    PROMOTE = "promote"
    ABORT = "abort"
    ROLLBACK = "rollback"

    @property
    def annotation(self) -> str:
        return ANNOTATION_PREFIX + self.value

    @property
    def event_type(self) -> EventType:
        return REQUEST_EVENTS[self]


REQUEST_EVENTS = {
    Operation.PROMOTE: EventType.PROMOTE_REQUESTED,
    Operation.ABORT: EventType.ABORT_REQUESTED,
    Operation.ROLLBACK: EventType.ROLLBACK_REQUESTED,
}


def requested(annotations: Mapping[str, str] | None) -> list[tuple[Operation, str]]:
    """The operations ``annotations`` ask for, with their values, in a fixed order."""
    found = annotations or {}
    return [(op, str(found[op.annotation])) for op in Operation if op.annotation in found]


def refusal(
    operation: Operation,
    projection: RunProjection | None,
    *,
    name: str,
    full: bool = False,
    keep_previous_s: float = 0.0,
    now: datetime | None = None,
) -> str:
    """Why ``operation`` has nothing to do now; "" when it applies.

    ``keep_previous_s``: the run's spec.rollback.keepPreviousFor in seconds (0: unset);
    a rollback needs a previous revision still inside that window at ``now``.
    """
    phase = projection.status.phase if projection is not None else Phase.PENDING
    run = f"workflowrun/{name}"
    if projection is not None and projection.deleting:
        phase = Phase.DELETING
    match operation:
        case Operation.PROMOTE:
            walking = (
                [e.backend for e in projection.status.placement if e.awaits_walk()]
                if projection
                else []
            )
            if full and walking:
                return (
                    f"{run} is walking its backends: {', '.join(walking)} still to install, "
                    "smoke-test and step; --full skips the remaining steps once every copy "
                    "is installed (plnt abort rolls the canary back now)"
                )
            if phase == Phase.PAUSED or (phase in SKIPPABLE and full):
                return ""
            hint = " (--full skips the remaining steps)" if phase in SKIPPABLE else ""
            return f"{run} has nothing to promote: phase {phase.value}{hint}"
        case Operation.ABORT:
            if phase in ABORTABLE:
                return ""
            return f"{run} has nothing to abort: phase {phase.value}"
        case Operation.ROLLBACK:
            nothing = f"{run} has no previous revision kept to roll back to"
            if phase != Phase.READY or projection is None or keep_previous_s <= 0:
                return nothing
            if not projection.previous_revision:
                return f"{nothing}: its first rollout replaced none"
            since = projection.phase_since
            if since is not None and now is not None:
                retired = since + timedelta(seconds=keep_previous_s)
                if now >= retired:
                    return (
                        f"{nothing}: {projection.previous_revision} was retired when"
                        f" keepPreviousFor ended at {retired.isoformat(timespec='seconds')}"
                    )
            return ""
