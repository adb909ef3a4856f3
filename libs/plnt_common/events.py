"""Saga events: the CloudEvents 1.0 envelope and one frozen data model per event type.

Events evolve by adding optional fields only. ``EVENT_DATA`` maps each type to its model;
``Envelope.payload()`` decodes ``data`` into it.
"""

import functools
import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from plnt_common.canary_walk import step_backend, step_label, total_steps
from plnt_common.errors import SpecInvalid, UnknownEventType
from plnt_common.golden import GoldenResult
from plnt_common.resources import (
    AnalysisStatus,
    Canary,
    PlacementEntry,
    PlntBackendSpec,
    Shadow,
    ShadowStatus,
    WorkflowRunSpec,
)
from plnt_common.status import Reason

TYPE_PREFIX = "work.plnt."


class EventType(StrEnum):
    """Every event of the saga; the value is the subject token and the CloudEvents suffix."""

    RUN_REQUESTED = "run.requested"
    """A spec generation must be rolled out."""
    SPEC_PULLED = "spec.pulled"
    """The spec was fetched, hash-verified, validated and stored by digest."""
    RUN_FAILED = "run.failed"
    """Terminal: nothing to compensate."""
    CANARY_INSTALLED = "canary.installed"
    """The canary runner is up."""
    INSTALL_FAILED = "install.failed"
    """The install did not complete; the installer cleans up."""
    SMOKE_PASSED = "smoke.passed"
    """The canary met its budgets."""
    SMOKE_FAILED = "smoke.failed"
    """The canary missed a budget, or was superseded before its verdict."""
    SHADOW_STARTED = "shadow.started"
    """Live calls are mirrored to the canary (which takes none) and its answers judged."""
    SHADOW_CHECKED = "shadow.checked"
    """The shadow phase's figures so far, at a check that found new pairs (status only)."""
    SHADOW_PASSED = "shadow.passed"
    """The canary's mirrored answers met every budget: the steps, or promotion, follow."""
    SHADOW_FAILED = "shadow.failed"
    """The canary's mirrored answers broke a budget, or came too few: the canary is taken out."""
    CANARY_STEPPED = "canary.stepped"
    """The canary holds the next weight of spec.canary.steps while live calls are judged."""
    ANALYSIS_PASSED = "analysis.passed"
    """A canary step's live calls met every budget: the next step, or 100% after the last."""
    ANALYSIS_FAILED = "analysis.failed"
    """A canary step broke a budget (or saw too little traffic): the canary is taken out."""
    RUN_READY = "run.ready"
    """Terminal: 100% of traffic on the new revision."""
    ROUTE_RESTORED = "route.restored"
    """Compensation: canary weight back to 0, stable untouched."""
    RUN_ROLLED_BACK = "run.rolled_back"
    """Terminal: canary removed, the previous stable still serving."""
    RUN_DELETED = "run.deleted"
    """The resource is being deleted: remove routes and releases."""
    RUN_REMOVED = "run.removed"
    """Terminal for deletion: the finalizer may be released."""
    STEP_TIMED_OUT = "step.timed_out"
    """A step passed its deadline."""
    PROMOTE_REQUESTED = "promote.requested"
    """An operator passed the manual gate or a step (`plnt promote`, plnt.work/promote)."""
    ABORT_REQUESTED = "abort.requested"
    """An operator asked to roll the in-flight canary back now (`plnt abort`)."""
    ROLLBACK_REQUESTED = "rollback.requested"
    """An operator asked for the kept previous revision back (`plnt rollback`)."""
    RUN_REVERTED = "run.reverted"
    """Terminal: traffic moved back to the kept previous revision (guard or rollback)."""
    CAPACITY_AWAITED = "capacity.awaited"
    """No node has the GPUs the canary needs: the run is Pending until capacity frees."""
    BACKEND_AWAITED = "backend.awaited"
    """A rollback or a deletion waits for a silent PlntBackend's API (status only)."""

    @property
    def cloudevents_type(self) -> str:
        return TYPE_PREFIX + self.value

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_EVENTS


TERMINAL_EVENTS = frozenset(
    {
        EventType.RUN_READY,
        EventType.RUN_ROLLED_BACK,
        EventType.RUN_FAILED,
        EventType.RUN_REMOVED,
        EventType.RUN_REVERTED,
    }
)


class _Data(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class RunSnapshot(_Data):
    """The WorkflowRun as it was at the generation this saga rolls out."""

    namespace: str = Field(examples=["default"])
    name: str = Field(examples=["review-responder"])
    uid: str = ""
    generation: int = Field(ge=1)
    spec: WorkflowRunSpec


class SpreadRelease(_Data):
    """The canary on one further backend of ``spec.placement.spread``."""

    backend: str = Field(description="The PlntBackend.", examples=["gpu-west"])
    release: str = Field(
        description="Release name on that backend.",
        examples=["default-review-responder-g2-gpu-west"],
    )
    url: str = Field(description="Runner base URL there.")


class CanaryRef(_Data):
    """Where a saga's canary runs."""

    revision: str = Field(description="Revision label.", examples=["1.2.0-g2"])
    release: str = Field(
        description="Release name on the backend.", examples=["review-responder-g2"]
    )
    url: str = Field(description="Runner base URL the router and smoke call.")
    spec_digest: str = ""
    backend: str = Field(default="", description="The PlntBackend of ``release``.")
    spread: tuple[SpreadRelease, ...] = Field(
        default=(),
        description="The same canary on each further backend of spec.placement.spread, in "
        "order; the router splits the revision's calls across all of them. A walk lists "
        "the copies installed so far.",
    )
    walk: tuple[str, ...] = Field(
        default=(),
        description="The backends a walked rollout covers, in order (spec.placement.spread "
        "above 1 replacing a stable, with canary steps): each copy is installed, smoke-tested "
        "and stepped when the walk reaches its backend. Empty: every copy at once.",
    )

    def copies(self) -> tuple[str, ...]:
        """The backends with a copy installed, in order."""
        return (self.backend, *(copy.backend for copy in self.spread))

    def waiting(self) -> tuple[str, ...]:
        """The walk's backends whose copy is not installed yet, in order."""
        installed = self.copies()
        return tuple(backend for backend in self.walk if backend not in installed)


class SmokeFigures(_Data):
    invocations: int = 0
    p50_ms: float = 0.0
    p95_ms: float = 0.0
    error_percent: float = 0.0
    passed: bool = False
    reason: str = ""
    golden: tuple[GoldenResult, ...] = Field(
        default=(), description="Each golden case's result, in the order the spec lists them."
    )
    failure: Reason | None = Field(
        default=None,
        description="Why a failed smoke rolls back when it is not SmokeFailed: RunnerContract "
        "when the canary missed a clause of the runner contract (named in reason).",
        examples=["RunnerContract"],
    )


class RunRequested(_Data):
    run: RunSnapshot
    lost: tuple[PlacementEntry, ...] = Field(
        default=(),
        description="Backends whose copy of the serving revision is lost (state Lost, with "
        "the reason): a replacement of the generation, placed on the next backend that "
        "fits (spec.placement.failover). Empty for every other saga.",
    )
    kept: tuple[PlacementEntry, ...] = Field(
        default=(),
        description="With lost: the backends whose copy keeps serving (state Serving), a "
        "spread run's other copies. The replacement installs only the copies missing.",
    )


class BackendChoice(_Data):
    """An acceptable PlntBackend of a run's placement: it exists, offers the GPU class and
    allows the run."""

    backend_name: str
    backend: PlntBackendSpec


class SpecPulled(_Data):
    run: RunSnapshot
    spec_digest: str = Field(description="sha256 of the spec bytes; the object name in plnt-specs.")
    workflow_name: str
    workflow_version: str
    revision: str
    backend_name: str = Field(description="The first acceptable backend of the placement.")
    backend: PlntBackendSpec
    fallbacks: tuple[BackendChoice, ...] = Field(
        default=(),
        description="The acceptable backends after backend_name, in order: the installer "
        "places the canary on the first of them all with room for it.",
    )
    passed_over: tuple[PlacementEntry, ...] = Field(
        default=(),
        description="Backends of the placement the puller found unacceptable (state "
        "Skipped), each with its one-line reason.",
    )

    def replacing(self) -> bool:
        """A replacement of a lost copy: the revision already serves (or served) on the
        backends marked Lost, so the new copy is named after its backend."""
        return bool(self.lost())

    def lost(self) -> tuple[str, ...]:
        """The backends whose copy a replacement replaces."""
        return tuple(entry.backend for entry in self.passed_over if entry.state == "Lost")

    def kept(self) -> tuple[str, ...]:
        """The backends whose copy keeps serving through a replacement."""
        return tuple(entry.backend for entry in self.passed_over if entry.state == "Serving")

    def choices(self) -> tuple[BackendChoice, ...]:
        """Every acceptable backend, in order of preference."""
        return (
            BackendChoice(backend_name=self.backend_name, backend=self.backend),
            *self.fallbacks,
        )


class RunFailed(_Data):
    reason: Reason
    message: str
    phase: str = Field(default="", description="The phase the saga failed in.")


class CanaryInstalled(_Data):
    run: RunSnapshot
    canary: CanaryRef
    backend: str = Field(default="", description="The PlntBackend the canary runs on.")
    placement: tuple[PlacementEntry, ...] = Field(
        default=(),
        description="The canary's backend (Installing) and each backend passed over for it "
        "(Skipped, with the reason; Lost for a replacement).",
    )

    def replacing(self) -> bool:
        """The canary replaces a lost copy of the revision that serves: it was judged
        already, so it is promoted once its smoke test passes."""
        return any(entry.state == "Lost" for entry in self.placement)

    def lost(self) -> tuple[str, ...]:
        """The backends whose copy a replacement replaces."""
        return tuple(entry.backend for entry in self.placement if entry.state == "Lost")

    def continues_walk(self) -> bool:
        """A walk's later copy, installed once the previous backend's steps passed."""
        return bool(self.canary.walk) and self.backend != self.canary.walk[0]


class InstallFailed(_Data):
    reason: Reason
    message: str
    revision: str
    release: str
    backend: str = Field(default="", description="The PlntBackend the install failed on.")


class SmokeVerdict(_Data):
    canary: CanaryRef
    figures: SmokeFigures
    backend: str = Field(
        default="",
        description="The copy tested when a walk installs its copies one at a time (its "
        "PlntBackend); empty: every copy of the canary.",
    )

    def continues_walk(self) -> bool:
        """The smoke test of a walk's later copy: its pass resumes the steps there."""
        return bool(self.canary.walk) and self.backend not in ("", self.canary.walk[0])


WALK_DESCRIPTION = (
    "The backends the steps walk in order, one canary at a time (spec.placement.spread "
    "above 1 replacing a stable): plan.steps on the first backend's copy, then on the "
    "next's. Empty: every copy takes the canary's share at once."
)
STEP_DESCRIPTION = "1-based position in plan.steps, counted across the walk's backends."
BACKEND_DESCRIPTION = (
    "The backend whose copy takes the canary's share at this step; empty without a walk."
)


class _WalkStep(_Data):
    """A step of a stepped canary, numbered across the walk (``canary_walk``)."""

    canary: CanaryRef
    plan: Canary = Field(description="The run's spec.canary: the steps, their interval, budgets.")
    step: int = Field(ge=1, description=STEP_DESCRIPTION, examples=[2])
    walk: tuple[str, ...] = Field(default=(), description=WALK_DESCRIPTION)
    backend: str = Field(default="", description=BACKEND_DESCRIPTION)

    def label(self) -> str:
        return step_label(self.plan.steps, self.walk, self.step)

    def last(self) -> bool:
        """The walk's last step: its pass promotes (or waits at the gate)."""
        return self.step >= total_steps(self.plan.steps, self.walk)

    def next_to_install(self) -> str:
        """The backend whose copy the walk installs once this step passes: the next
        step's, when that copy is not installed yet; "" otherwise."""
        if self.last():
            return ""
        following = step_backend(self.plan.steps, self.walk, self.step + 1)
        return following if following in self.canary.waiting() else ""


class CanaryStepped(_WalkStep):
    traffic_percent: int = Field(ge=0, le=100, description="The weight this step holds.")
    hold_s: float = Field(
        gt=0, description="Longest the step may be held: its interval plus the traffic wait."
    )


class ShadowStarted(_Data):
    canary: CanaryRef
    plan: Shadow = Field(description="The run's spec.canary.shadow: its share, N and budgets.")
    noise_percent: int = Field(
        ge=0, le=100, description="Share of live calls sent to the stable again (noise floor)."
    )
    figures: ShadowStatus = Field(description="No pairs yet: N and the calls waited for.")


class ShadowJudged(_Data):
    """The shadow phase's figures at a check (shadow.checked) or its verdict."""

    canary: CanaryRef
    plan: Shadow = Field(description="The thresholds the figures were judged against.")
    figures: ShadowStatus = Field(
        description="N pairs, the noise floor, each ratio, what was spent and the worst examples."
    )


class AnalysisVerdict(_WalkStep):
    traffic_percent: int = Field(ge=0, le=100)
    figures: AnalysisStatus = Field(description="Both revisions' figures and the verdict.")


class RunReady(_Data):
    revision: str
    endpoint: str
    spec_digest: str = ""
    previous_revision: str = ""


class RouteRestored(_Data):
    revision: str = Field(description="The canary revision taken out of the route.")
    release: str = ""
    stable_revision: str = ""
    reason: Reason
    message: str = ""


class RunRolledBack(_Data):
    revision: str
    stable_revision: str = ""
    reason: Reason
    message: str = ""


class RunDeleted(_Data):
    pass


class RunRemoved(_Data):
    releases_removed: tuple[str, ...] = ()


class StepTimedOut(_Data):
    phase: str
    deadline_s: float


class CapacityAwaited(_Data):
    """The canary fits no node of its PlntBackend now; the install is retried as GPUs free."""

    backend: str = Field(examples=["gpu-east"])
    gpu_class: str = Field(examples=["a100"])
    needed: int = Field(ge=0, description="GPUs one runner pod needs.", examples=[2])
    largest_free: int = Field(ge=0, description="The most any node has free.", examples=[1])
    message: str = Field(examples=["no node has 2 free nvidia.com/gpu (largest 1)"])
    placement: tuple[PlacementEntry, ...] = Field(
        default=(), description="Every backend of the placement, Skipped with its reason."
    )


class BackendAwaited(_Data):
    """A rollback or a deletion removed what it could see and waits for PlntBackends whose
    API is silent: the run's releases there are unknown. Published when what it waits for
    or what it removed changes; the event comes back to the installer until they answer."""

    backends: tuple[str, ...] = Field(description="The silent PlntBackends.")
    removed: tuple[str, ...] = Field(
        default=(), description="Releases removed so far where the backends answered."
    )
    deleting: bool = Field(default=False, description="A deletion waits (else a rollback).")
    message: str = Field(
        examples=["PlntBackend 'gpu-far' has not answered; the run's releases there are unknown"]
    )


class OperatorRequest(_Data):
    """An operator's promote, abort or rollback: from `plnt` or a kubectl annotation."""

    by: str = Field(
        default="", description="Where it came from: `plnt` or the annotation and its value."
    )
    full: bool = Field(default=False, description="promote only: skip the remaining steps.")


class RunReverted(_Data):
    revision: str = Field(description="The kept previous revision, serving again.")
    reverted_revision: str = Field(description="The promoted revision taken out of the route.")
    reason: Reason
    message: str = ""


EVENT_DATA: dict[EventType, type[_Data]] = {
    EventType.RUN_REQUESTED: RunRequested,
    EventType.SPEC_PULLED: SpecPulled,
    EventType.RUN_FAILED: RunFailed,
    EventType.CANARY_INSTALLED: CanaryInstalled,
    EventType.INSTALL_FAILED: InstallFailed,
    EventType.SMOKE_PASSED: SmokeVerdict,
    EventType.SMOKE_FAILED: SmokeVerdict,
    EventType.SHADOW_STARTED: ShadowStarted,
    EventType.SHADOW_CHECKED: ShadowJudged,
    EventType.SHADOW_PASSED: ShadowJudged,
    EventType.SHADOW_FAILED: ShadowJudged,
    EventType.CANARY_STEPPED: CanaryStepped,
    EventType.ANALYSIS_PASSED: AnalysisVerdict,
    EventType.ANALYSIS_FAILED: AnalysisVerdict,
    EventType.RUN_READY: RunReady,
    EventType.ROUTE_RESTORED: RouteRestored,
    EventType.RUN_ROLLED_BACK: RunRolledBack,
    EventType.RUN_DELETED: RunDeleted,
    EventType.RUN_REMOVED: RunRemoved,
    EventType.STEP_TIMED_OUT: StepTimedOut,
    EventType.CAPACITY_AWAITED: CapacityAwaited,
    EventType.BACKEND_AWAITED: BackendAwaited,
    EventType.PROMOTE_REQUESTED: OperatorRequest,
    EventType.ABORT_REQUESTED: OperatorRequest,
    EventType.ROLLBACK_REQUESTED: OperatorRequest,
    EventType.RUN_REVERTED: RunReverted,
}


def saga_id(namespace: str, name: str, generation: int, attempt: int = 1) -> str:
    """``<ns>.<name>.<generation>.<attempt>``."""
    return f"{namespace}.{name}.{generation}.{attempt}"


class Envelope(BaseModel):
    """A CloudEvents 1.0 structured-mode event with plnt's extension attributes."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    specversion: str = "1.0"
    id: str = Field(default_factory=lambda: str(uuid.uuid4()))
    type: str = Field(examples=["work.plnt.run.requested"])
    source: str = Field(examples=["/plnt/watcher"])
    subject: str = Field(description="<namespace>/<name>", examples=["default/review-responder"])
    time: datetime = Field(default_factory=lambda: datetime.now(UTC))
    datacontenttype: str = "application/json"
    data: dict[str, Any]
    sagaid: str = Field(examples=["default.review-responder.1.1"])
    generation: int
    causationid: str = Field(default="", description="id of the event this one answers.")

    @functools.cached_property
    def event_type(self) -> EventType:
        return EventType(self.type.removeprefix(TYPE_PREFIX))

    @property
    def namespace(self) -> str:
        return self.subject.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.subject.split("/", 1)[1]

    def payload(self) -> Any:
        """The data decoded into its event type's model (validated once, then cached)."""
        return self.typed_data

    # A cached_property keeps its value in the instance's dict, which pydantic allows on a
    # frozen model; a private attribute would cost every decoded event its set-up, 15% of
    # the decoding (replay decodes every stored event).
    @functools.cached_property
    def typed_data(self) -> Any:
        """``data`` validated into its event type's model."""
        return EVENT_DATA[self.event_type].model_validate(self.data)


def new_event(
    event_type: EventType,
    data: _Data,
    *,
    namespace: str,
    name: str,
    sagaid: str,
    generation: int,
    source: str,
    causation: "Envelope | None" = None,
) -> Envelope:
    expected = EVENT_DATA[event_type]
    if not isinstance(data, expected):
        raise TypeError(f"{event_type} carries {expected.__name__}, not {type(data).__name__}")
    return Envelope(
        type=event_type.cloudevents_type,
        source=f"/plnt/{source}",
        subject=f"{namespace}/{name}",
        data=data.model_dump(mode="json", by_alias=True),
        sagaid=sagaid,
        generation=generation,
        causationid=causation.id if causation else "",
    )


def follow_up(cause: Envelope, event_type: EventType, data: _Data, *, source: str) -> Envelope:
    """The next event of the same saga, caused by ``cause``."""
    return new_event(
        event_type,
        data,
        namespace=cause.namespace,
        name=cause.name,
        sagaid=cause.sagaid,
        generation=cause.generation,
        source=source,
        causation=cause,
    )


def decode_event(raw: bytes) -> Envelope:
    """Parse and check one event; raises ``UnknownEventType`` (a ``SpecInvalid``) for a
    type this version does not know (a newer version's), ``SpecInvalid`` for a poison
    message."""
    try:
        envelope = Envelope.model_validate_json(raw)
    except ValueError as exc:  # pydantic's ValidationError
        raise SpecInvalid(f"undecodable event: {str(exc).splitlines()[0]}") from None
    if envelope.type.removeprefix(TYPE_PREFIX) not in EVENT_TYPES:
        raise UnknownEventType(f"unknown event type {envelope.type!r}: a newer plnt's")
    try:
        envelope.payload()
    except ValueError as exc:
        raise SpecInvalid(f"undecodable event: {str(exc).splitlines()[0]}") from None
    return envelope


EVENT_TYPES = frozenset(event_type.value for event_type in EventType)
