"""The saga projection: fold events into one record per run, the same way live and on replay.

``apply_event`` is pure. The watcher folds each event as it arrives and writes the result
to ``plnt-runs``; ``plnt replay`` folds the whole stream into an empty bucket and must get
the same records. Events of an older saga change nothing, and applying an event twice
changes nothing more, so late or redelivered events never move a run backwards.
"""

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from plnt_common.events import (
    CanaryInstalled,
    Envelope,
    EventType,
    InstallFailed,
    RouteRestored,
    RunFailed,
    RunReady,
    RunRolledBack,
    SmokeVerdict,
    SpecPulled,
    StepTimedOut,
)
from plnt_common.resources import (
    CanaryStatus,
    Condition,
    SmokeStatus,
    WorkflowRunStatus,
)
from plnt_common.status import ConditionType, Phase, Reason

STEP_RANK: dict[EventType, int] = {
    EventType.RUN_REQUESTED: 1,
    EventType.SPEC_PULLED: 2,
    EventType.CANARY_INSTALLED: 3,
    EventType.SMOKE_PASSED: 4,
    EventType.SMOKE_FAILED: 4,
    EventType.INSTALL_FAILED: 4,
    EventType.STEP_TIMED_OUT: 4,
    EventType.ROUTE_RESTORED: 5,
    EventType.RUN_READY: 9,
    EventType.RUN_ROLLED_BACK: 9,
    EventType.RUN_FAILED: 9,
    EventType.RUN_DELETED: 10,
    EventType.RUN_REMOVED: 11,
}
"""Order of steps within a saga: an event ranked below what was seen is stale."""
TERMINAL_RANK = STEP_RANK[EventType.RUN_READY]
OPENING_EVENTS = frozenset({EventType.RUN_REQUESTED, EventType.RUN_DELETED})
"""Only these may open a projection: anything else for an unknown run is stale."""


def saga_order(sagaid: str) -> tuple[int, int]:
    """(generation, attempt) of ``<ns>.<name>.<generation>.<attempt>``, for comparing sagas."""
    *_, generation, attempt = sagaid.rsplit(".", 2)
    return int(generation), int(attempt)


class RunProjection(BaseModel):
    """What plnt knows of one run: its status and where its current saga stands."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    saga_id: str = ""
    generation: int = 0
    rank: int = 0
    status: WorkflowRunStatus = Field(default_factory=WorkflowRunStatus)
    phase_since: datetime | None = None
    requested_at: datetime | None = None
    deleting: bool = False
    removed: bool = False
    stable_revision: str = ""
    stamps: dict[str, tuple[int, str]] = Field(
        default_factory=dict,
        description="Per field, the (step rank, event time) of the event that set it last.",
    )

    @property
    def key(self) -> str:
        return run_key(self.namespace, self.name)

    @property
    def saga_active(self) -> bool:
        """A saga is in flight: requested and not yet at a terminal event."""
        return (bool(self.saga_id) and self.rank < TERMINAL_RANK) or (
            self.deleting and not self.removed
        )


def run_key(namespace: str, name: str) -> str:
    """The run's key in ``plnt-runs``: ``<namespace>.<name>``."""
    return f"{namespace}.{name}"


def empty_projection(namespace: str, name: str) -> RunProjection:
    return RunProjection(namespace=namespace, name=name)


def fold_into(projections: dict[str, RunProjection], event: Envelope) -> None:
    """Replay's step: fold ``event`` into the projections by key, as the watcher does live.

    A run is opened only by ``run.requested`` or ``run.deleted`` and dropped once its
    removal completed (the watcher deletes its key then).
    """
    key = run_key(event.namespace, event.name)
    current = projections.get(key)
    if current is None:
        if event.event_type not in OPENING_EVENTS:
            return
        current = empty_projection(event.namespace, event.name)
    updated = apply_event(current, event)
    if updated.removed:
        projections.pop(key, None)
    else:
        projections[key] = updated


def apply_event(current: RunProjection, event: Envelope) -> RunProjection:
    """The projection after ``event``: pure, idempotent and independent of arrival order.

    Within a saga each field (status field, condition, projection field) keeps the value
    of the event with the highest (step rank, event time) that set it, so a late or
    redelivered event fills in what it alone knows and never moves the run backwards;
    folding a saga's events in any order gives the same projection as the stream order.
    """
    event_type = event.event_type
    rank = STEP_RANK[event_type]
    if current.saga_id and saga_order(event.sagaid) < saga_order(current.saga_id):
        return current  # an older saga: history only
    base = current if event.sagaid == current.saga_id else _start_saga(current, event)
    if (
        base.rank == TERMINAL_RANK
        and rank == TERMINAL_RANK
        and base.stamps.get("terminal", (0, "")) != (rank, event.time.isoformat())
    ):
        return current  # a second terminal event (never published, but never trusted)
    stamp = (rank, event.time.isoformat())
    stamps = dict(base.stamps)

    def newer(field: str) -> bool:
        if stamps.get(field, (0, "")) <= stamp:
            stamps[field] = stamp
            return True
        return False

    step = _STEP_UPDATES[event_type](base, event)
    status_step = step.pop("status", {})
    assert isinstance(status_step, dict)
    condition_specs = status_step.pop("conditions", [])
    status_updates = {k: v for k, v in status_step.items() if newer(f"status.{k}")}
    conditions = base.status.conditions
    for kind, ok, reason, message in condition_specs:
        if newer(f"condition.{kind}"):
            conditions = _condition(conditions, event, kind, ok, reason, message)
    updates = {k: v for k, v in step.items() if newer(k)}
    if "phase" in status_updates:
        updates["phase_since"] = event.time
    if rank == TERMINAL_RANK:
        stamps["terminal"] = stamp
    status = base.status.model_copy(
        update={
            "saga_id": event.sagaid,
            "observed_generation": event.generation,
            "conditions": conditions,
            **status_updates,
        }
    )
    return base.model_copy(
        update={"rank": max(base.rank, rank), "status": status, "stamps": stamps, **updates}
    )


def _start_saga(current: RunProjection, event: Envelope) -> RunProjection:
    status = current.status.model_copy(
        update={
            "canary": CanaryStatus(),
            "smoke": SmokeStatus(),
            "message": "",
            "conditions": (),
        }
    )
    return current.model_copy(
        update={
            "saga_id": event.sagaid,
            "generation": event.generation,
            "rank": 0,
            "status": status,
            "stamps": {},
        }
    )


CONDITION_ORDER = {kind: index for index, kind in enumerate(ConditionType)}


def _condition(
    conditions: tuple[Condition, ...],
    event: Envelope,
    kind: ConditionType,
    ok: bool,
    reason: str,
    message: str = "",
) -> tuple[Condition, ...]:
    """Replace one condition, keeping lastTransitionTime when the status did not change."""
    new_status: Literal["True", "False"] = "True" if ok else "False"
    previous = next((c for c in conditions if c.type == kind), None)
    since = (
        previous.last_transition_time
        if previous is not None and previous.status == new_status
        else event.time
    )
    condition = Condition(
        type=kind,
        status=new_status,
        reason=reason,
        message=message,
        last_transition_time=since,
        observed_generation=event.generation,
    )
    others = [c for c in conditions if c.type != kind]
    return tuple(sorted((*others, condition), key=lambda c: CONDITION_ORDER[c.type]))


ConditionSpec = tuple[ConditionType, bool, str, str]


def _with(current: RunProjection, event: Envelope, *pairs: ConditionSpec) -> list[ConditionSpec]:
    """The conditions a step sets; ``apply_event`` merges each by its stamp."""
    return list(pairs)


def _requested(current: RunProjection, event: Envelope) -> dict[str, object]:
    conditions = _with(
        current, event, (ConditionType.READY, False, Reason.PROGRESSING, "rolling out")
    )
    return {
        "requested_at": event.time,
        "status": {"phase": Phase.PULLING, "conditions": conditions, "message": "pulling spec"},
    }


def _pulled(current: RunProjection, event: Envelope) -> dict[str, object]:
    data: SpecPulled = event.payload()
    conditions = _with(
        current,
        event,
        (
            ConditionType.SPEC_PULLED,
            True,
            Reason.SUCCEEDED,
            f"{data.workflow_name}@{data.workflow_version}",
        ),
    )
    return {
        "status": {
            "phase": Phase.INSTALLING,
            "spec_digest": data.spec_digest,
            "conditions": conditions,
            "message": f"installing canary {data.revision}",
        }
    }


def _installed(current: RunProjection, event: Envelope) -> dict[str, object]:
    data: CanaryInstalled = event.payload()
    percent = data.run.spec.canary.traffic_percent
    conditions = _with(
        current, event, (ConditionType.CANARY_INSTALLED, True, Reason.SUCCEEDED, data.canary.url)
    )
    return {
        "status": {
            "phase": Phase.SMOKING,
            "canary": CanaryStatus(revision=data.canary.revision, traffic_percent=percent),
            "conditions": conditions,
            "message": f"smoke-testing canary {data.canary.revision}",
        }
    }


def _smoke_status(data: SmokeVerdict) -> SmokeStatus:
    figures = data.figures
    return SmokeStatus(
        invocations=figures.invocations,
        p50_ms=figures.p50_ms,
        p95_ms=figures.p95_ms,
        error_percent=figures.error_percent,
        passed=figures.passed,
        reason=figures.reason,
    )


def _smoke_passed(current: RunProjection, event: Envelope) -> dict[str, object]:
    data: SmokeVerdict = event.payload()
    conditions = _with(
        current, event, (ConditionType.SMOKE_PASSED, True, Reason.SUCCEEDED, data.figures.reason)
    )
    return {
        "status": {
            "phase": Phase.PROMOTING,
            "smoke": _smoke_status(data),
            "conditions": conditions,
            "message": f"promoting {data.canary.revision}",
        }
    }


def _smoke_failed(current: RunProjection, event: Envelope) -> dict[str, object]:
    data: SmokeVerdict = event.payload()
    conditions = _with(
        current,
        event,
        (ConditionType.SMOKE_PASSED, False, Reason.SMOKE_FAILED, data.figures.reason),
    )
    return {
        "status": {
            "phase": Phase.ROLLING_BACK,
            "smoke": _smoke_status(data),
            "conditions": conditions,
            "message": f"smoke test failed: {data.figures.reason}",
        }
    }


def _install_failed(current: RunProjection, event: Envelope) -> dict[str, object]:
    data: InstallFailed = event.payload()
    conditions = _with(
        current, event, (ConditionType.CANARY_INSTALLED, False, data.reason, data.message)
    )
    return {
        "status": {"phase": Phase.ROLLING_BACK, "conditions": conditions, "message": data.message}
    }


def _timed_out(current: RunProjection, event: Envelope) -> dict[str, object]:
    data: StepTimedOut = event.payload()
    return {
        "status": {
            "phase": Phase.ROLLING_BACK,
            "message": f"{data.phase} passed its {data.deadline_s:g}s deadline",
        }
    }


def _restored(current: RunProjection, event: Envelope) -> dict[str, object]:
    data: RouteRestored = event.payload()
    return {
        "status": {
            "phase": Phase.ROLLING_BACK,
            "canary": CanaryStatus(revision=data.revision, traffic_percent=0),
            "message": data.message or f"canary {data.revision} out of the route",
        }
    }


def _ready(current: RunProjection, event: Envelope) -> dict[str, object]:
    data: RunReady = event.payload()
    conditions = _with(
        current,
        event,
        (ConditionType.PROMOTED, True, Reason.SUCCEEDED, f"100% on {data.revision}"),
        (ConditionType.READY, True, Reason.SUCCEEDED, f"serving {data.revision}"),
    )
    return {
        "stable_revision": data.revision,
        "status": {
            "phase": Phase.READY,
            "revision": data.revision,
            "endpoint": data.endpoint,
            "canary": CanaryStatus(),
            "conditions": conditions,
            "message": f"serving {data.revision}",
        },
    }


def _rolled_back(current: RunProjection, event: Envelope) -> dict[str, object]:
    data: RunRolledBack = event.payload()
    still = f"; {data.stable_revision} keeps serving" if data.stable_revision else ""
    conditions = _with(
        current, event, (ConditionType.READY, bool(data.stable_revision), data.reason, data.message)
    )
    return {
        "status": {
            "phase": Phase.ROLLED_BACK,
            "canary": CanaryStatus(),
            "conditions": conditions,
            "message": f"rolled back {data.revision}: {data.message}{still}",
        }
    }


def _failed(current: RunProjection, event: Envelope) -> dict[str, object]:
    data: RunFailed = event.payload()
    conditions = _with(
        current,
        event,
        (ConditionType.READY, bool(current.stable_revision), data.reason, data.message),
    )
    return {
        "status": {
            "phase": Phase.FAILED,
            "canary": CanaryStatus(),
            "conditions": conditions,
            "message": f"{data.reason}: {data.message}",
        }
    }


def _deleted(current: RunProjection, event: Envelope) -> dict[str, object]:
    return {
        "deleting": True,
        "status": {"phase": Phase.DELETING, "message": "removing routes and releases"},
    }


def _removed(current: RunProjection, event: Envelope) -> dict[str, object]:
    return {"deleting": True, "removed": True, "status": {"message": "removed"}}


_STEP_UPDATES = {
    EventType.RUN_REQUESTED: _requested,
    EventType.SPEC_PULLED: _pulled,
    EventType.CANARY_INSTALLED: _installed,
    EventType.SMOKE_PASSED: _smoke_passed,
    EventType.SMOKE_FAILED: _smoke_failed,
    EventType.INSTALL_FAILED: _install_failed,
    EventType.STEP_TIMED_OUT: _timed_out,
    EventType.ROUTE_RESTORED: _restored,
    EventType.RUN_READY: _ready,
    EventType.RUN_ROLLED_BACK: _rolled_back,
    EventType.RUN_FAILED: _failed,
    EventType.RUN_DELETED: _deleted,
    EventType.RUN_REMOVED: _removed,
}
