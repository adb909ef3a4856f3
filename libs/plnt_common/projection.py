"""The saga projection: fold events into one record per run, the same way live and on replay.

``apply_event`` is pure. The watcher folds each event as it arrives and writes the result
to ``plnt-runs``; ``plnt replay`` folds the whole stream into an empty bucket and must get
the same records. Events of an older saga change nothing, and applying an event twice
changes nothing more, so late or redelivered events never move a run backwards.
"""

from datetime import datetime
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from plnt_common.events import (
    AnalysisVerdict,
    BackendAwaited,
    CanaryInstalled,
    CanaryStepped,
    CapacityAwaited,
    Envelope,
    EventType,
    InstallFailed,
    RouteRestored,
    RunFailed,
    RunReady,
    RunReverted,
    RunRolledBack,
    ShadowJudged,
    ShadowStarted,
    SmokeVerdict,
    SpecPulled,
    StepTimedOut,
)
from plnt_common.messages import deadline_passed
from plnt_common.resources import (
    AnalysisStatus,
    CanaryStatus,
    Condition,
    PlacementEntry,
    SmokeStatus,
    WorkflowRunStatus,
)
from plnt_common.status import ConditionType, Phase, Reason

STEP_RANK: dict[EventType, int] = {
    EventType.RUN_REQUESTED: 1,
    EventType.SPEC_PULLED: 2,
    EventType.CAPACITY_AWAITED: 2,
    EventType.CANARY_INSTALLED: 3,
    EventType.SMOKE_PASSED: 4,
    EventType.SMOKE_FAILED: 4,
    EventType.INSTALL_FAILED: 6,  # a walk's later copy fails after steps passed
    EventType.SHADOW_STARTED: 5,
    EventType.SHADOW_CHECKED: 5,
    EventType.SHADOW_PASSED: 5,
    EventType.SHADOW_FAILED: 6,
    EventType.CANARY_STEPPED: 5,
    EventType.ANALYSIS_PASSED: 5,
    EventType.ANALYSIS_FAILED: 6,
    EventType.STEP_TIMED_OUT: 6,
    EventType.ROUTE_RESTORED: 7,
    EventType.BACKEND_AWAITED: 7,  # a deletion's ranks with run.deleted (``_rank``)
    EventType.RUN_READY: 9,
    EventType.RUN_ROLLED_BACK: 9,
    EventType.RUN_FAILED: 9,
    EventType.RUN_DELETED: 10,
    EventType.RUN_REMOVED: 11,
    EventType.PROMOTE_REQUESTED: 5,
    EventType.ABORT_REQUESTED: 6,
    EventType.ROLLBACK_REQUESTED: 8,
    EventType.RUN_REVERTED: 9,
}
"""Order of steps within a saga: an event ranked below what was seen is stale."""
WALK_RANK: dict[EventType, int] = {
    EventType.CANARY_INSTALLED: STEP_RANK[EventType.CANARY_STEPPED],
    EventType.SMOKE_PASSED: STEP_RANK[EventType.ANALYSIS_PASSED],
    EventType.SMOKE_FAILED: STEP_RANK[EventType.ANALYSIS_FAILED],
}
"""A walk's later copy is installed and smoke-tested among the steps (``canary_walk``)."""
TERMINAL_RANK = STEP_RANK[EventType.RUN_READY]
_NO_CANARY = CanaryStatus()
_NO_SMOKE = SmokeStatus()
_NO_ANALYSIS = AnalysisStatus()
OPENING_EVENTS = frozenset({EventType.RUN_REQUESTED, EventType.RUN_DELETED})
"""Only these may open a projection: anything else for an unknown run is stale."""


def _rank(event: Envelope) -> int:
    if event.event_type is EventType.BACKEND_AWAITED and event.payload().deleting:
        return STEP_RANK[EventType.RUN_DELETED]
    if event.event_type in WALK_RANK:
        data: CanaryInstalled | SmokeVerdict = event.payload()
        if data.continues_walk():
            return WALK_RANK[event.event_type]
    return STEP_RANK[event.event_type]


def saga_order(sagaid: str) -> tuple[int, int]:
    """(generation, attempt) of ``<ns>.<name>.<generation>.<attempt>``, for comparing sagas."""
    # the split's bound only spares splitting the name: the last two parts are the same
    *_, generation, attempt = sagaid.rsplit(".", 2)  # pragma: no mutate
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
    previous_revision: str = Field(
        default="",
        description="The revision the last promotion replaced (kept at 0 % for keepPreviousFor).",
    )
    saga_traceparent: str = Field(
        default="",
        description="The traceparent the saga's opening event was published with: events "
        "published outside any step (a deadline, an operator's request) continue the saga's "
        "trace from it. Empty while tracing is off.",
    )
    previous_placement: tuple[PlacementEntry, ...] = Field(
        default=(),
        description="status.placement before the last promotion: what a revert restores.",
    )
    serving_before_saga: tuple[PlacementEntry, ...] = Field(
        default=(),
        description="Where the run served when the current saga began: its promotion "
        "makes this the previous placement, whatever order its events are folded in.",
    )
    step_hold_s: float = Field(
        default=0.0,
        description="Longest the canary step being held (or the shadow phase) may take: "
        "the base of its deadline.",
    )
    gate_after_smoke: bool = Field(
        default=False,
        description="manualGate without steps: a passed smoke test waits at the gate (Paused).",
    )
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


def trace_id_of(traceparent: str) -> str:
    """The trace id (32 hex digits) a version-00 ``traceparent`` names; "" for any other."""
    parts = traceparent.split("-")
    if len(parts) != 4 or parts[0] != "00" or len(parts[1]) != 32 or parts[1] == "0" * 32:
        return ""
    return parts[1] if all(c in "0123456789abcdef" for c in parts[1]) else ""


def run_key(namespace: str, name: str) -> str:
    """The run's key in ``plnt-runs``: ``<namespace>.<name>``."""
    return f"{namespace}.{name}"


def empty_projection(namespace: str, name: str) -> RunProjection:
    return RunProjection(namespace=namespace, name=name)


_EMPTY = empty_projection("", "")


class ProjectionFold:
    """Replay's fold: the projections of many events, by key, as the watcher folds live.

    A run is opened only by ``run.requested`` or ``run.deleted`` and dropped once its
    removal completed (the watcher deletes its key then). Each run's changes are kept in a
    ``_Draft`` instead of copying the frozen models for every event; ``projections()``
    equals applying ``apply_event`` to the same events one by one.
    """

    def __init__(self) -> None:
        self._drafts: dict[str, _Draft] = {}

    def add(self, event: Envelope, *, traceparent: str = "") -> None:
        """Fold ``event``; ``traceparent``: the header it was stored with (see
        ``apply_event``)."""
        namespace, name = event.namespace, event.name
        key = run_key(namespace, name)
        draft = self._drafts.get(key)
        if draft is None:
            if event.event_type not in OPENING_EVENTS:
                return
            # a copy of one empty projection: validating a new one (its status and
            # defaults) for every run cost a sixth of the fold
            opened = _EMPTY.model_copy(update={"namespace": namespace, "name": name})
            draft = self._drafts[key] = _Draft(opened)
        draft.apply(event, traceparent=traceparent)
        if draft.removed:
            del self._drafts[key]

    def projections(self) -> dict[str, RunProjection]:
        return {key: draft.build() for key, draft in self._drafts.items()}


def apply_event(current: RunProjection, event: Envelope, *, traceparent: str = "") -> RunProjection:
    """The projection after ``event``: pure, idempotent and independent of arrival order.

    ``traceparent``: the W3C header ``event`` was published with. An opening event's names
    the saga's trace (``status.traceId``) and is kept as ``saga_traceparent``; the watcher
    and replay pass the same one (the stream stores the header).

    Within a saga each field (status field, condition, projection field) keeps the value
    of the event with the highest (step rank, event time) that set it, so a late or
    redelivered event fills in what it alone knows and never moves the run backwards;
    folding a saga's events in any order gives the same projection as the stream order.
    """
    draft = _Draft(current)
    return draft.build() if draft.apply(event, traceparent=traceparent) else current


class _ConditionUpdate(NamedTuple):
    status: Literal["True", "False"]
    reason: str
    message: str
    since: datetime
    generation: int


class _Draft:
    """A projection being folded: what events changed, kept in plain dicts.

    ``build`` makes the frozen models once, with the same values (and the same fields
    marked as set) as copying the models at every event would.
    """

    def __init__(self, origin: RunProjection) -> None:
        self.origin = origin
        self.saga_id = origin.saga_id
        self.rank = origin.rank
        self.stamps = dict(origin.stamps)
        self.conditions = origin.status.conditions
        self.condition_updates: dict[ConditionType, _ConditionUpdate] = {}
        self.updates: dict[str, object] = {}
        self.status_updates: dict[str, object] = {}

    @property
    def placement(self) -> tuple[PlacementEntry, ...]:
        value = self.status_updates.get("placement", self.origin.status.placement)
        assert isinstance(value, tuple)
        return value

    @property
    def stable_revision(self) -> str:
        value = self.updates.get("stable_revision", self.origin.stable_revision)
        assert isinstance(value, str)
        return value

    @property
    def removed(self) -> bool:
        return bool(self.updates.get("removed", self.origin.removed))

    def apply(self, event: Envelope, *, traceparent: str = "") -> bool:
        """Fold ``event`` in; False when it changes nothing (an older saga, a second end)."""
        event_type = event.event_type
        rank = _rank(event)
        sagaid = event.sagaid
        stamp = (rank, event.time.isoformat())
        stamps = self.stamps
        if sagaid != self.saga_id:
            # not mutated: `<=` is the same, as an equal order is the same saga id
            if self.saga_id and saga_order(sagaid) < saga_order(self.saga_id):  # pragma: no mutate
                return False  # an older saga: history only
            self._start_saga(event)
            stamps = self.stamps
        elif self.rank == TERMINAL_RANK and rank == TERMINAL_RANK:
            # a second terminal event (never published, but never trusted), or the first
            # once more, which would change nothing
            return False
        # Each field keeps the value of the newest (rank, time) that set it: the checks
        # are inlined, with the stamps' keys made once, since they run for every event.
        step = _STEP_UPDATES[event_type](self, event)
        status_step = step.pop("status", {})
        assert isinstance(status_step, dict)
        status_updates, updates = self.status_updates, self.updates
        condition_specs = status_step.pop("conditions", ())
        for field, value in status_step.items():
            key = _STATUS_STAMPS[field]
            if stamps.get(key, _NO_STAMP) <= stamp:
                stamps[key] = stamp
                status_updates[field] = value
                if field == "phase":
                    updates["phase_since"] = event.time
        for kind, ok, reason, message in condition_specs:
            key = _CONDITION_STAMPS[kind]
            if stamps.get(key, _NO_STAMP) <= stamp:
                stamps[key] = stamp
                self._set_condition(event, kind, ok, reason, message)
        for field, value in step.items():
            if stamps.get(field, _NO_STAMP) <= stamp:
                stamps[field] = stamp
                updates[field] = value
        if rank > self.rank:  # pragma: no mutate  (`>=` sets the same rank again)
            self.rank = rank
        status_updates["saga_id"] = sagaid
        status_updates["observed_generation"] = event.generation
        if event_type in OPENING_EVENTS and (trace_id := trace_id_of(traceparent)):
            status_updates["trace_id"] = trace_id  # the trace the watcher started
            updates["saga_traceparent"] = traceparent
        return True

    def build(self) -> RunProjection:
        """The projection with every change applied."""
        status = self.origin.status.model_copy(
            update={
                **self.status_updates,
                **self._at_gate(),
                **self._promoted(),
                "conditions": self._built_conditions(),
            }
        )
        return self.origin.model_copy(
            update={
                **self.updates,
                "rank": self.rank,
                "status": status,
                "stamps": self.stamps,
            }
        )

    def _at_gate(self) -> dict[str, object]:
        """Promoting after a smoke test the manual gate holds reads as Paused.

        smoke.passed does not carry the spec; canary.installed does. Deriving it here,
        once both are folded, keeps the fold independent of their arrival order.
        """
        phase = self.status_updates.get("phase", self.origin.status.phase)
        gated = self.updates.get("gate_after_smoke", self.origin.gate_after_smoke)
        if phase != Phase.PROMOTING or not gated:
            return {}
        return {"phase": Phase.PAUSED, "message": gate_message(self.origin.name)}

    def _promoted(self) -> dict[str, object]:
        """A saga ended Ready serves where its canary was installed.

        run.ready does not carry the placement, and a canary.installed (a walk's later
        copy's) may be folded after it: derived here, once both are."""
        phase = self.status_updates.get("phase", self.origin.status.phase)
        if phase != Phase.READY or self.rank != TERMINAL_RANK:
            return {}
        return _promoted_placement_status(self)

    def _start_saga(self, event: Envelope) -> None:
        # a batch fold (replay) builds once: what the ended saga derives is kept first
        self.status_updates.update(self._promoted())
        self.saga_id = event.sagaid
        self.rank = 0  # pragma: no mutate  (every event ranks 1 or more)
        self.stamps = {}
        self.conditions = ()
        self.condition_updates.clear()
        self.updates.update(
            saga_id=event.sagaid,
            generation=event.generation,
            gate_after_smoke=False,
            saga_traceparent="",
            serving_before_saga=_serving(self.placement),
        )
        self.status_updates.update(
            canary=_NO_CANARY,
            smoke=_NO_SMOKE,
            analysis=_NO_ANALYSIS,
            shadow=None,
            message="",
            trace_id=None,
        )

    def _set_condition(
        self, event: Envelope, kind: ConditionType, ok: bool, reason: str, message: str
    ) -> None:
        """Replace one condition, keeping lastTransitionTime when the status did not change."""
        new_status: Literal["True", "False"] = "True" if ok else "False"
        previous = self.condition_updates.get(kind)
        if previous is not None:
            since = previous.since if previous.status == new_status else event.time
        else:
            kept = next((c for c in self.conditions if c.type == kind), None)
            since = (
                kept.last_transition_time
                if kept is not None and kept.status == new_status
                else event.time
            )
        self.condition_updates[kind] = _ConditionUpdate(
            new_status, reason, message, since, event.generation
        )

    def _built_conditions(self) -> tuple[Condition, ...]:
        if not self.condition_updates:
            return self.conditions
        others = [c for c in self.conditions if c.type not in self.condition_updates]
        updated = [
            Condition(
                type=kind,
                status=update.status,
                reason=update.reason,
                message=update.message,
                last_transition_time=update.since,
                observed_generation=update.generation,
            )
            for kind, update in self.condition_updates.items()
        ]
        return tuple(sorted((*others, *updated), key=lambda c: CONDITION_ORDER[c.type]))


CONDITION_ORDER = {kind: index for index, kind in enumerate(ConditionType)}
_NO_STAMP = (0, "")
_STATUS_STAMPS = {field: f"status.{field}" for field in WorkflowRunStatus.model_fields}
_CONDITION_STAMPS = {kind: f"condition.{kind}" for kind in ConditionType}


ConditionSpec = tuple[ConditionType, bool, str, str]


def _requested(current: _Draft, event: Envelope) -> dict[str, object]:
    conditions = [(ConditionType.READY, False, Reason.PROGRESSING, "rolling out")]
    return {
        "requested_at": event.time,
        "status": {"phase": Phase.PULLING, "conditions": conditions, "message": "pulling spec"},
    }


def _pulled(current: _Draft, event: Envelope) -> dict[str, object]:
    data: SpecPulled = event.payload()
    conditions = [
        (
            ConditionType.SPEC_PULLED,
            True,
            Reason.SUCCEEDED,
            f"{data.workflow_name}@{data.workflow_version}",
        )
    ]
    return {
        "status": {
            "phase": Phase.INSTALLING,
            "spec_digest": data.spec_digest,
            "conditions": conditions,
            "message": f"installing canary {data.revision}",
        }
    }


def _serving(placement: tuple[PlacementEntry, ...]) -> tuple[PlacementEntry, ...]:
    return tuple(entry for entry in placement if entry.state == "Serving")


def _placed(current: _Draft, entries: tuple[PlacementEntry, ...]) -> dict[str, object]:
    """status.placement while a canary is placed: where the run serves now, then the
    saga's own entries (its backend Installing, the ones passed over Skipped). Events of
    an older plnt carry none: the placement is left as it was."""
    if not entries:
        return {}
    ours = {entry.backend for entry in entries}
    kept = tuple(e for e in _serving(current.placement) if e.backend not in ours)
    return {"placement": kept + entries}


def _installed(current: _Draft, event: Envelope) -> dict[str, object]:
    data: CanaryInstalled = event.payload()
    percent = data.run.spec.canary.traffic_percent
    # a walk's later copy leaves the condition as its first copy set it: True since then
    conditions = (
        []
        if data.continues_walk()
        else [(ConditionType.CANARY_INSTALLED, True, Reason.SUCCEEDED, data.canary.url)]
    )
    plan = data.run.spec.canary
    on = f" on {data.backend}" if data.canary.walk else ""
    return {
        "gate_after_smoke": plan.manual_gate and not plan.steps,
        "status": {
            "phase": Phase.SMOKING,
            "canary": CanaryStatus(revision=data.canary.revision, traffic_percent=percent),
            "conditions": conditions,
            "message": f"smoke-testing canary {data.canary.revision}{on}",
            **_placed(current, data.placement),
        },
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
        golden=figures.golden,
    )


def _smoke_passed(current: _Draft, event: Envelope) -> dict[str, object]:
    data: SmokeVerdict = event.payload()
    conditions = [(ConditionType.SMOKE_PASSED, True, Reason.SUCCEEDED, data.figures.reason)]
    phase, message = Phase.PROMOTING, f"promoting {data.canary.revision}"
    if data.continues_walk():  # the steps resume on this copy; the condition stays the first's
        phase, message = Phase.PROGRESSING, f"smoke test passed on {data.backend}"
        conditions = []
    return {
        "status": {
            "phase": phase,
            "smoke": _smoke_status(data),
            "conditions": conditions,
            "message": message,
        }
    }


def _smoke_failed(current: _Draft, event: Envelope) -> dict[str, object]:
    data: SmokeVerdict = event.payload()
    reason = data.figures.failure or Reason.SMOKE_FAILED
    conditions = [(ConditionType.SMOKE_PASSED, False, reason, data.figures.reason)]
    return {
        "status": {
            "phase": Phase.ROLLING_BACK,
            "smoke": _smoke_status(data),
            "conditions": conditions,
            "message": f"smoke test failed: {data.figures.reason}",
        }
    }


def gate_message(name: str) -> str:
    return f"waiting at the manual gate: plnt promote {name}"


def _stepped(current: _Draft, event: Envelope) -> dict[str, object]:
    data: CanaryStepped = event.payload()
    label = data.label()
    status = {
        "phase": Phase.PROGRESSING,
        "canary": CanaryStatus(
            revision=data.canary.revision, traffic_percent=data.traffic_percent, step=label
        ),
        "message": f"step {label}: {data.traffic_percent}% on {data.canary.revision}, "
        f"live calls judged for {data.plan.step_interval_s:g}s",
    }
    return {"step_hold_s": data.hold_s, "status": status}


def _analysis_passed(current: _Draft, event: Envelope) -> dict[str, object]:
    data: AnalysisVerdict = event.payload()
    last = data.last()
    label = data.label()
    message = f"step {label} passed: {data.figures.reason}"
    phase = Phase.PROMOTING if last else Phase.PROGRESSING
    if waiting := data.next_to_install():
        phase = Phase.INSTALLING
        message += f"; installing canary {data.canary.revision} on {waiting}"
    if last and data.plan.manual_gate:  # the canary keeps the last step's weight meanwhile
        phase, message = Phase.PAUSED, gate_message(event.name)
    return {"status": {"phase": phase, "analysis": data.figures, "message": message}}


def _analysis_failed(current: _Draft, event: Envelope) -> dict[str, object]:
    data: AnalysisVerdict = event.payload()
    label = data.label()
    return {
        "status": {
            "phase": Phase.ROLLING_BACK,
            "analysis": data.figures,
            "message": f"step {label} failed: {data.figures.reason}",
        }
    }


def _shadow_started(current: _Draft, event: Envelope) -> dict[str, object]:
    data: ShadowStarted = event.payload()
    message = (
        f"shadowing {data.canary.revision}: {data.plan.percent}% of live calls mirrored, "
        f"verdict after {data.plan.calls} pairs"
    )
    return {
        "step_hold_s": data.plan.max_duration_s,  # the phase's own length: its deadline's base
        "status": {
            "phase": Phase.SHADOWING,
            # mirrored calls only: the canary answers no caller while it is shadowed
            "canary": CanaryStatus(revision=data.canary.revision, traffic_percent=0),
            "shadow": data.figures,
            "message": message,
        },
    }


def _shadow_checked(current: _Draft, event: Envelope) -> dict[str, object]:
    """Figures only: the phase and message stay those of shadow.started."""
    data: ShadowJudged = event.payload()
    return {"status": {"shadow": data.figures}}


def _shadow_passed(current: _Draft, event: Envelope) -> dict[str, object]:
    """The steps (canary.stepped) or the promotion follow; until then, Promoting."""
    data: ShadowJudged = event.payload()
    message = f"shadow passed: {data.figures.reason}"
    return {"status": {"phase": Phase.PROMOTING, "shadow": data.figures, "message": message}}


def _shadow_failed(current: _Draft, event: Envelope) -> dict[str, object]:
    data: ShadowJudged = event.payload()
    return {
        "status": {
            "phase": Phase.ROLLING_BACK,
            "shadow": data.figures,
            "message": f"shadow failed: {data.figures.reason}",
        }
    }


def _install_failed(current: _Draft, event: Envelope) -> dict[str, object]:
    data: InstallFailed = event.payload()
    conditions = [(ConditionType.CANARY_INSTALLED, False, data.reason, data.message)]
    return {
        "status": {"phase": Phase.ROLLING_BACK, "conditions": conditions, "message": data.message}
    }


def _timed_out(current: _Draft, event: Envelope) -> dict[str, object]:
    data: StepTimedOut = event.payload()
    return {
        "status": {
            "phase": Phase.ROLLING_BACK,
            "message": deadline_passed(data.phase, data.deadline_s),
        }
    }


def _restored(current: _Draft, event: Envelope) -> dict[str, object]:
    data: RouteRestored = event.payload()
    return {
        "status": {
            "phase": Phase.ROLLING_BACK,
            "canary": CanaryStatus(revision=data.revision),  # at 0 %, the default
            "message": data.message or f"canary {data.revision} out of the route",
        }
    }


def _ready(current: _Draft, event: Envelope) -> dict[str, object]:
    data: RunReady = event.payload()
    conditions = [
        (ConditionType.PROMOTED, True, Reason.SUCCEEDED, f"100% on {data.revision}"),
        (ConditionType.READY, True, Reason.SUCCEEDED, f"serving {data.revision}"),
    ]
    return {
        "stable_revision": data.revision,
        "previous_revision": data.previous_revision,
        **_promoted_placement(current),
        "status": {
            "phase": Phase.READY,
            "revision": data.revision,
            "endpoint": data.endpoint,
            "canary": _NO_CANARY,
            "conditions": conditions,
            "message": f"serving {data.revision}",
        },
    }


def _promoted_placement(current: _Draft) -> dict[str, object]:
    """The placement a later revert restores: where the run served before this saga."""
    before = current.updates.get("serving_before_saga", current.origin.serving_before_saga)
    return {"previous_placement": before}


def _promoted_placement_status(current: _Draft) -> dict[str, object]:
    """Promoted: the canary's backend serves (the old backend's release is retired or only
    kept); the backends passed over stay with their reasons. A replacement (a backend
    Lost) retires only the lost copies: the ones still Serving stay."""
    placement = current.placement
    if not any(entry.state == "Installing" for entry in placement):
        return {}
    replacing = any(entry.state == "Lost" for entry in placement)
    return {
        "placement": tuple(
            entry.model_copy(update={"state": "Serving", "reason": ""})
            if entry.state == "Installing"
            else entry
            for entry in placement
            if replacing or entry.state != "Serving"
        )
    }


def _without_canary(current: _Draft) -> dict[str, object]:
    """The canary is gone (rolled back, failed): the run serves where it served."""
    # set even when unchanged: its stamp keeps a late canary.installed's entries out
    return {"placement": _serving(current.placement)}


def _rolled_back(current: _Draft, event: Envelope) -> dict[str, object]:
    data: RunRolledBack = event.payload()
    still = f"; {data.stable_revision} keeps serving" if data.stable_revision else ""
    conditions = [(ConditionType.READY, bool(data.stable_revision), data.reason, data.message)]
    return {
        "status": {
            "phase": Phase.ROLLED_BACK,
            "canary": _NO_CANARY,
            "conditions": conditions,
            "message": f"rolled back {data.revision}: {data.message}{still}",
            **_without_canary(current),
        }
    }


def _requested_by_operator(current: _Draft, event: Envelope) -> dict[str, object]:
    """An operator's request is history: what it changes shows in the events that answer it."""
    return {}


def _reverted(current: _Draft, event: Envelope) -> dict[str, object]:
    data: RunReverted = event.payload()
    conditions = [(ConditionType.READY, True, data.reason, data.message)]
    previous = current.updates.get("previous_placement", current.origin.previous_placement)
    return {
        "stable_revision": data.revision,
        "status": {
            "phase": Phase.REVERTED,
            "revision": data.revision,
            "canary": _NO_CANARY,
            "conditions": conditions,
            "message": f"reverted {data.reverted_revision} to {data.revision}: {data.message}",
            **({"placement": previous} if previous else {}),
        },
    }


def _failed(current: _Draft, event: Envelope) -> dict[str, object]:
    data: RunFailed = event.payload()
    conditions = [(ConditionType.READY, bool(current.stable_revision), data.reason, data.message)]
    return {
        "status": {
            "phase": Phase.FAILED,
            "canary": _NO_CANARY,
            "conditions": conditions,
            "message": f"{data.reason}: {data.message}",
            **_without_canary(current),
        }
    }


def _capacity_awaited(current: _Draft, event: Envelope) -> dict[str, object]:
    data: CapacityAwaited = event.payload()
    reason = Reason.NO_CAPACITY
    conditions = [(ConditionType.CANARY_INSTALLED, False, reason, data.message)]
    return {
        "status": {
            "phase": Phase.PENDING,
            "conditions": conditions,
            "message": f"{reason}: {data.message}",
            **_placed(current, data.placement),
        }
    }


def _backend_awaited(current: _Draft, event: Envelope) -> dict[str, object]:
    """The message only: the run stays RollingBack (or Deleting) until the wait ends."""
    data: BackendAwaited = event.payload()
    return {"status": {"message": data.message}}


def _deleted(current: _Draft, event: Envelope) -> dict[str, object]:
    return {
        "deleting": True,
        "status": {"phase": Phase.DELETING, "message": "removing routes and releases"},
    }


def _removed(current: _Draft, event: Envelope) -> dict[str, object]:
    return {"deleting": True, "removed": True, "status": {"message": "removed"}}


_STEP_UPDATES = {
    EventType.RUN_REQUESTED: _requested,
    EventType.SPEC_PULLED: _pulled,
    EventType.CANARY_INSTALLED: _installed,
    EventType.SMOKE_PASSED: _smoke_passed,
    EventType.SMOKE_FAILED: _smoke_failed,
    EventType.INSTALL_FAILED: _install_failed,
    EventType.SHADOW_STARTED: _shadow_started,
    EventType.SHADOW_CHECKED: _shadow_checked,
    EventType.SHADOW_PASSED: _shadow_passed,
    EventType.SHADOW_FAILED: _shadow_failed,
    EventType.CANARY_STEPPED: _stepped,
    EventType.ANALYSIS_PASSED: _analysis_passed,
    EventType.ANALYSIS_FAILED: _analysis_failed,
    EventType.STEP_TIMED_OUT: _timed_out,
    EventType.ROUTE_RESTORED: _restored,
    EventType.RUN_READY: _ready,
    EventType.RUN_ROLLED_BACK: _rolled_back,
    EventType.RUN_FAILED: _failed,
    EventType.RUN_DELETED: _deleted,
    EventType.RUN_REMOVED: _removed,
    EventType.PROMOTE_REQUESTED: _requested_by_operator,
    EventType.ABORT_REQUESTED: _requested_by_operator,
    EventType.ROLLBACK_REQUESTED: _requested_by_operator,
    EventType.RUN_REVERTED: _reverted,
    EventType.CAPACITY_AWAITED: _capacity_awaited,
    EventType.BACKEND_AWAITED: _backend_awaited,
}
