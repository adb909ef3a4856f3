"""The plnt.work/v1 resources users write: ``WorkflowRun`` and ``PlntBackend``.

Models validate everything the contract lists; ``parse_resource`` turns a YAML/JSON mapping
into one of them or raises ``SpecInvalid`` with a message naming the field.
"""

import ipaddress
import itertools
import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from plnt_common.errors import SpecInvalid
from plnt_common.golden import MAX_GOLDEN_CASES, GoldenCase, GoldenResult, check_unique_names
from plnt_common.names import (
    SHA256_PIN,
    check_dns_label,
    check_namespace,
    check_run_name,
    duration_seconds,
    parse_ref,
)
from plnt_common.status import ConditionType, Phase
from plnt_common.workflow import describe_validation_error

API_VERSION = "plnt.work/v1"
REGISTRY_URL = re.compile(
    r"^(s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9._/-]*)?"
    r"|file:///[^\0]*"
    r"|oci://[A-Za-z0-9.-]+(:[0-9]+)?(/[A-Za-z0-9._/-]*)?)$"
)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class _Observed(BaseModel):
    """What the API server or plnt itself writes: fields plnt does not keep are ignored.

    A real server adds metadata on every write (``managedFields``, ``ownerReferences``,
    kubectl's annotations, fields of newer versions), and a newer plnt may write status
    fields an older one does not know; refusing them would stop every rollout. A user's
    ``spec`` stays strict (``_Model``).
    """

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


class ObjectMeta(_Observed):
    """The metadata subset plnt keeps, as the Kubernetes API returns it."""

    name: str
    namespace: str | None = None
    uid: str = ""
    generation: int = 0
    resource_version: str = Field(default="", alias="resourceVersion")
    finalizers: tuple[str, ...] = ()
    creation_timestamp: datetime | None = Field(default=None, alias="creationTimestamp")
    deletion_timestamp: datetime | None = Field(default=None, alias="deletionTimestamp")
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


# --- WorkflowRun -------------------------------------------------------------------------


MAX_VERIFY_KEYS = 8
"""Bound of ``verify.publicKeys``: enough for a rotation (old and new) and a few signers."""

MINISIGN_PUBLIC_KEY = re.compile(r"^RW[A-Za-z0-9+/]{54}$")
"""A minisign Ed25519 public key's base64 (42 bytes: ``Ed``, key id, key)."""


class Verify(_Model):
    public_keys: tuple[
        Annotated[str, StringConstraints(pattern=MINISIGN_PUBLIC_KEY.pattern)], ...
    ] = Field(
        alias="publicKeys",
        min_length=1,
        max_length=MAX_VERIFY_KEYS,
        description="minisign public keys (RW...); the spec must be signed by one of them.",
    )


SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
"""A Secret's name: a DNS-1123 subdomain (at most ``MAX_SECRET_NAME`` characters)."""
MAX_SECRET_NAME = 253


class PullSecret(_Model):
    name: str = Field(
        min_length=1,
        max_length=MAX_SECRET_NAME,
        pattern=SECRET_NAME.pattern,
        description=(
            "A kubernetes.io/dockerconfigjson Secret in the run's namespace whose auths the "
            "puller uses for this pull (Kubernetes only)."
        ),
    )


class WorkflowRef(_Model):
    ref: str = Field(description="<name>@<semver> of the Workflow in the registry.")
    registry: str = Field(description="s3://bucket[/prefix], file:///abs/path or oci://...")
    integrity_hash: str | None = Field(default=None, alias="integrityHash")
    verify: Verify | None = Field(
        default=None, description="Require a valid minisign signature by one of these keys."
    )
    pull_secret: PullSecret | None = Field(
        default=None,
        alias="pullSecret",
        description="Registry credentials for an oci:// registry, from a Secret of the run's "
        "namespace, like a pod's imagePullSecrets.",
    )

    @model_validator(mode="after")
    def _pull_secret_is_for_oci(self) -> "WorkflowRef":
        if self.pull_secret is not None and not self.registry.startswith("oci://"):
            raise ValueError(
                "pullSecret applies to oci:// registries only; s3:// takes credentials from "
                "the puller's AWS configuration, file:// needs none"
            )
        return self

    @field_validator("ref")
    @classmethod
    def _ref_shape(cls, value: str) -> str:
        parse_ref(value)
        return value

    @field_validator("registry")
    @classmethod
    def _registry_shape(cls, value: str) -> str:
        if ".." in value.split("/") or not REGISTRY_URL.match(value):
            raise ValueError(
                f"registry {value!r} must be s3://bucket[/prefix], file:///abs/path or oci://host/path"
            )
        return value

    @field_validator("integrity_hash")
    @classmethod
    def _hash_shape(cls, value: str | None) -> str | None:
        if value is not None and not SHA256_PIN.match(value):
            raise ValueError("integrityHash must be sha256:<64 lowercase hex digits>")
        return value

    @property
    def name(self) -> str:
        return parse_ref(self.ref)[0]

    @property
    def version(self) -> str:
        return parse_ref(self.ref)[1]


class BackendSelection(_Model):
    cluster: str | None = Field(
        default=None,
        description="Name of the PlntBackend to deploy onto; leave out with spec.placement.",
    )
    gpu_class: str | None = Field(default=None, alias="gpuClass")
    gpu_count: int = Field(default=0, ge=0, le=16, alias="gpuCount")
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")

    @field_validator("cluster")
    @classmethod
    def _cluster_is_label(cls, value: str | None) -> str | None:
        return None if value is None else check_dns_label(value, what="backend cluster")


class LabelSelectorRequirement(_Model):
    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_fit_operator(self) -> "LabelSelectorRequirement":
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs values")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelector(_Model):
    """A Kubernetes label selector; empty selects everything."""

    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, alias="matchExpressions"
    )


SPREAD_EXCEEDS_BACKENDS = "spec.placement.spread exceeds the number of backends listed"
SPREAD_WITH_KEPT_PREVIOUS = (
    "spec.placement.spread above 1 with spec.rollback.keepPreviousFor is not supported yet"
    " (a kept previous revision is held on one backend)"
)


class Placement(_Model):
    """Where a run may go, over several PlntBackends (DESIGN.md section 13)."""

    backends: tuple[str, ...] | None = Field(
        default=None,
        min_length=1,
        max_length=32,
        description="PlntBackend names in order of preference.",
    )
    selector: LabelSelector | None = Field(
        default=None, description="PlntBackends by label, taken in name order."
    )
    spread: int = Field(
        default=1, ge=1, le=32, description="How many backends run the runner at once."
    )
    failover: bool = Field(
        default=False,
        description="A runner its backend reports lost is replaced on the next backend "
        "that fits (with spread above 1, the lost copy; the router sends its calls to the "
        "other copies meanwhile, whether or not this is set).",
    )

    @field_validator("backends")
    @classmethod
    def _backends_are_labels(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        for name in value:
            check_dns_label(name, what="placement backend")
        if len(set(value)) != len(value):
            raise ValueError("spec.placement.backends names a backend twice")
        return value

    @model_validator(mode="after")
    def _one_way_to_choose(self) -> "Placement":
        if (self.backends is None) == (self.selector is None):
            raise ValueError("spec.placement needs exactly one of backends and selector")
        if self.backends is not None and self.spread > len(self.backends):
            raise ValueError(SPREAD_EXCEEDS_BACKENDS)
        return self


class Replicas(_Model):
    min: int = Field(default=1, ge=0, le=1000)
    max: int = Field(default=1, ge=1, le=1000)

    @model_validator(mode="after")
    def _min_le_max(self) -> "Replicas":
        if self.min > self.max:
            raise ValueError(f"replicas.min ({self.min}) exceeds replicas.max ({self.max})")
        return self


class Autoscaling(_Model):
    target_invocations_per_second: float | None = Field(
        default=None, gt=0, le=100_000, alias="targetInvocationsPerSecond"
    )


MIN_STEP_INTERVAL_S = 0.1
MAX_STEP_INTERVAL_S = 86_400.0
MAX_CANARY_STEPS = 10
DEFAULT_STEP_INTERVAL = "1m"


def _check_duration(value: str, *, low_s: float, high_s: float, bounds: str) -> str:
    seconds = duration_seconds(value)
    if not low_s <= seconds <= high_s:
        raise ValueError(f"must be between {bounds}, got {value!r}")
    return value


class Analysis(_Model):
    """Budgets each canary step's live calls must meet, judged beside the stable's."""

    min_invocations: int = Field(
        default=20,
        ge=1,
        le=1_000_000,
        alias="minInvocations",
        description="Fewer canary calls in a step: it waits (bounded), never passes empty.",
    )
    max_error_percent: float = Field(default=1, ge=0, le=100, alias="maxErrorPercent")
    max_p95_ms: float = Field(default=2500, gt=0, le=600_000, alias="maxP95Ms")
    max_p95_ratio_to_stable: float | None = Field(
        default=None, gt=0, le=1000, alias="maxP95RatioToStable"
    )
    max_tokens_per_invocation: float | None = Field(
        default=None, gt=0, alias="maxTokensPerInvocation"
    )
    max_cost_per_invocation_usd: float | None = Field(
        default=None, gt=0, alias="maxCostPerInvocationUsd"
    )


DEFAULT_SHADOW_MAX_DURATION = "10m"
MAX_SHADOW_CALLS = 100_000


class ShadowCompare(_Model):
    """How close the canary's mirrored answers must stay to the stable's."""

    min_similarity: float = Field(
        default=0.85,
        ge=0,
        le=1,
        alias="minSimilarity",
        description="Least median answer similarity, canary vs stable (0..1).",
    )
    max_similarity_drop: float = Field(
        default=0.02,
        ge=0,
        le=1,
        alias="maxSimilarityDrop",
        description="How far the canary's median may sit below the stable-vs-stable median "
        "(the noise floor).",
    )
    max_cost_ratio: float = Field(
        default=1.1,
        gt=0,
        le=1000,
        alias="maxCostRatio",
        description="Largest mean cost per call, canary / stable.",
    )
    max_p95_ratio: float = Field(
        default=1.2,
        gt=0,
        le=1000,
        alias="maxP95Ratio",
        description="Largest p95 latency, canary / stable.",
    )
    max_error_percent_delta: float = Field(
        default=1,
        ge=0,
        le=100,
        alias="maxErrorPercentDelta",
        description="Largest canary error percent minus the stable's, in points (non-2xx).",
    )
    max_tool_call_diff_percent: float = Field(
        default=2,
        ge=0,
        le=100,
        alias="maxToolCallDiffPercent",
        description="Largest share of pairs whose intended side-effect calls differ, in percent.",
    )


class Shadow(_Model):
    """Live calls mirrored to the canary after the smoke test, before it takes any."""

    percent: int = Field(
        default=0,
        ge=0,
        le=100,
        description="Share of live calls mirrored to the canary (0: no shadow phase).",
    )
    calls: int = Field(
        default=200,
        ge=1,
        le=MAX_SHADOW_CALLS,
        description="The verdict comes after this many paired calls.",
    )
    max_duration: str = Field(
        default=DEFAULT_SHADOW_MAX_DURATION,
        alias="maxDuration",
        description="Too few pairs by then: the shadow phase fails (1s..24h).",
    )
    budget_usd: float | None = Field(
        default=None,
        gt=0,
        alias="budgetUsd",
        description="Hard cap on what shadow calls (the noise floor's too) spend on the LLM.",
    )
    compare: ShadowCompare = Field(default_factory=ShadowCompare)

    @field_validator("max_duration")
    @classmethod
    def _max_duration_is_a_duration(cls, value: str) -> str:
        return _check_duration(value, low_s=1.0, high_s=MAX_STEP_INTERVAL_S, bounds="1s and 24h")

    @property
    def max_duration_s(self) -> float:
        return duration_seconds(self.max_duration)


class Canary(_Model):
    traffic_percent: int = Field(default=10, ge=0, le=100, alias="trafficPercent")
    steps: tuple[int, ...] = Field(
        default=(),
        max_length=MAX_CANARY_STEPS,
        description="Weights held in turn after the smoke test, each judged on live calls.",
    )
    step_interval: str | None = Field(
        default=None, alias="stepInterval", description=f"Default {DEFAULT_STEP_INTERVAL}."
    )
    analysis: Analysis = Field(default_factory=Analysis)
    manual_gate: bool = Field(
        default=False,
        alias="manualGate",
        description="After the last step, wait in phase Paused until `plnt promote`.",
    )
    shadow: Shadow | None = Field(
        default=None,
        description="Mirror live calls to the canary and compare its answers before it "
        "takes any (after the smoke test, before the steps).",
    )

    @field_validator("steps")
    @classmethod
    def _steps_ascend_below_100(cls, steps: tuple[int, ...]) -> tuple[int, ...]:
        if any(not 1 <= step <= 99 for step in steps):
            raise ValueError(f"each step must be 1..99, got {list(steps)}")
        if any(later <= earlier for earlier, later in itertools.pairwise(steps)):
            raise ValueError(f"must ascend, got {list(steps)}")
        return steps

    @field_validator("step_interval")
    @classmethod
    def _interval_is_a_duration(cls, value: str | None) -> str | None:
        if value is None:
            return value
        return _check_duration(
            value, low_s=MIN_STEP_INTERVAL_S, high_s=MAX_STEP_INTERVAL_S, bounds="100ms and 24h"
        )

    @property
    def step_interval_s(self) -> float:
        return duration_seconds(self.step_interval or DEFAULT_STEP_INTERVAL)

    @property
    def shadowed(self) -> bool:
        """A shadow phase is asked for: ``shadow.percent`` above 0."""
        return self.shadow is not None and self.shadow.percent > 0


class SmokeTest(_Model):
    invocations: int = Field(default=10, ge=1, le=10_000)
    p95_budget_ms: float = Field(default=2500, gt=0, le=600_000, alias="p95BudgetMs")
    error_budget_percent: float = Field(default=1, ge=0, le=100, alias="errorBudgetPercent")
    payload: dict[str, Any] | None = None
    golden: tuple[GoldenCase, ...] = Field(
        default=(),
        max_length=MAX_GOLDEN_CASES,
        description="Cases sent to the canary whose reply text must meet their rules.",
    )

    @field_validator("golden")
    @classmethod
    def _golden_names_unique(cls, cases: tuple[GoldenCase, ...]) -> tuple[GoldenCase, ...]:
        return check_unique_names(cases)


MAX_KEEP_PREVIOUS_S = 7 * 86_400.0
DEFAULT_GUARD_WINDOW = "5m"


class Guard(_Model):
    """Budgets the promoted revision's live calls must meet for ``window`` after promotion."""

    window: str = Field(
        default=DEFAULT_GUARD_WINDOW,
        description="How long after promotion the new revision is judged (100ms..24h).",
    )
    max_error_percent: float = Field(default=2, ge=0, le=100, alias="maxErrorPercent")
    max_p95_ms: float | None = Field(default=None, gt=0, le=600_000, alias="maxP95Ms")

    @field_validator("window")
    @classmethod
    def _window_is_a_duration(cls, value: str) -> str:
        return _check_duration(
            value, low_s=MIN_STEP_INTERVAL_S, high_s=MAX_STEP_INTERVAL_S, bounds="100ms and 24h"
        )

    @property
    def window_s(self) -> float:
        return duration_seconds(self.window)


class Rollback(_Model):
    keep_previous_for: str | None = Field(
        default=None,
        alias="keepPreviousFor",
        description="The previous revision stays installed at 0 % this long after promotion.",
    )

    @field_validator("keep_previous_for")
    @classmethod
    def _keep_is_a_duration(cls, value: str | None) -> str | None:
        if value is None:
            return value
        return _check_duration(value, low_s=1.0, high_s=MAX_KEEP_PREVIOUS_S, bounds="1s and 7d")

    @property
    def keep_previous_s(self) -> float:
        """0 when the previous revision is retired at promotion."""
        return duration_seconds(self.keep_previous_for) if self.keep_previous_for else 0.0


class WorkflowRunSpec(_Model):
    workflow: WorkflowRef
    backend: BackendSelection = Field(default_factory=BackendSelection)
    placement: Placement | None = None
    replicas: Replicas = Field(default_factory=Replicas)
    autoscaling: Autoscaling = Field(default_factory=Autoscaling)
    canary: Canary = Field(default_factory=Canary)
    smoke_test: SmokeTest = Field(default_factory=SmokeTest, alias="smokeTest")
    guard: Guard | None = None
    rollback: Rollback = Field(default_factory=Rollback)

    @model_validator(mode="after")
    def _one_way_to_place(self) -> "WorkflowRunSpec":
        if self.placement is not None and self.backend.cluster is not None:
            raise ValueError("spec.backend.cluster and spec.placement exclude each other: give one")
        if self.placement is None and self.backend.cluster is None:
            raise ValueError("spec.backend.cluster or spec.placement is required")
        return self

    @model_validator(mode="after")
    def _spread_keeps_no_previous(self) -> "WorkflowRunSpec":
        if self.placement and self.placement.spread > 1 and self.rollback.keep_previous_for:
            raise ValueError(SPREAD_WITH_KEPT_PREVIOUS)
        return self

    @property
    def candidates(self) -> tuple[str, ...]:
        """The named backends in order of preference (empty for a selector placement)."""
        if self.placement is None:
            return (self.backend.cluster,) if self.backend.cluster else ()
        return self.placement.backends or ()

    @model_validator(mode="after")
    def _guard_has_a_revision_to_revert_to(self) -> "WorkflowRunSpec":
        if self.guard is not None and self.rollback.keep_previous_s < self.guard.window_s:
            raise ValueError(
                f"guard.window ({self.guard.window}) needs rollback.keepPreviousFor of at least"
                " as long: the guard reverts to the kept previous revision"
            )
        return self


class Condition(_Observed):
    type: ConditionType
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    last_transition_time: datetime = Field(alias="lastTransitionTime")
    observed_generation: int = Field(default=0, alias="observedGeneration")


class CanaryStatus(_Observed):
    revision: str = ""
    traffic_percent: int = Field(default=0, alias="trafficPercent")
    step: str = Field(default="", description="The step being held, like 2/3.")


class RevisionFigures(_Observed):
    """One revision's live calls in one step's window."""

    invocations: int = 0
    error_percent: float = Field(default=0.0, alias="errorPercent")
    p95_ms: float = Field(default=0.0, alias="p95Ms")
    tokens_per_invocation: float = Field(default=0.0, alias="tokensPerInvocation")
    cost_per_invocation_usd: float = Field(default=0.0, alias="costPerInvocationUsd")


class AnalysisStatus(_Observed):
    """The last judged canary step: its verdict and both revisions' figures."""

    step: str = ""
    passed: bool = False
    reason: str = ""
    window_s: float = Field(default=0.0, alias="windowS")
    canary: RevisionFigures = Field(default_factory=RevisionFigures)
    stable: RevisionFigures = Field(default_factory=RevisionFigures)


EXAMPLE_TEXT_CHARS = 2000
"""Each side of a worst example in status is cut to this many characters."""


class ShadowExample(_Observed):
    """One mirrored call among the least similar: its input and both answers, as JSON text
    cut to ``EXAMPLE_TEXT_CHARS``."""

    input: str = ""
    stable: str = ""
    canary: str = ""
    score: float = 0.0


SHADOW_JUDGING = "judging"
"""How ``ShadowStatus.reason`` starts while no verdict is in (``judging: 57 of 200 pairs``)."""


class ShadowStatus(_Observed):
    """The shadow phase's latest figures: canary vs stable on mirrored live calls."""

    pairs: int = Field(default=0, description="Canary pairs judged (canary vs stable).")
    calls: int = Field(default=0, description="Pairs the verdict waits for (spec calls).")
    noise_pairs: int = Field(
        default=0, alias="noisePairs", description="Stable-vs-stable pairs (the noise floor)."
    )
    similarity: float | None = Field(
        default=None, description="Median answer similarity, canary vs stable."
    )
    noise_similarity: float | None = Field(
        default=None,
        alias="noiseSimilarity",
        description="Median answer similarity, stable vs stable.",
    )
    cost_ratio: float | None = Field(
        default=None, alias="costRatio", description="Mean cost per call, canary / stable."
    )
    p95_ratio: float | None = Field(
        default=None, alias="p95Ratio", description="p95 latency, canary / stable."
    )
    error_percent_delta: float = Field(
        default=0.0,
        alias="errorPercentDelta",
        description="Canary error percent minus the stable's, in points.",
    )
    tool_call_diff_percent: float = Field(
        default=0.0,
        alias="toolCallDiffPercent",
        description="Share of pairs whose side-effect calls differ, in percent.",
    )
    spent_usd: float = Field(
        default=0.0, alias="spentUsd", description="What the mirrored calls cost."
    )
    passed: bool = False
    reason: str = ""
    examples: tuple[ShadowExample, ...] = Field(
        default=(), description="The least similar pairs, worst first."
    )


class SmokeStatus(_Observed):
    invocations: int = 0
    p50_ms: float = Field(default=0.0, alias="p50Ms")
    p95_ms: float = Field(default=0.0, alias="p95Ms")
    error_percent: float = Field(default=0.0, alias="errorPercent")
    passed: bool = False
    reason: str = ""
    golden: tuple[GoldenResult, ...] = ()


TRACE_ID_PATTERN = r"^[0-9a-f]{32}$"
"""A W3C trace id: 32 lowercase hex digits."""


class PlacementEntry(_Observed):
    """Where one backend stands for the run (DESIGN.md section 13)."""

    backend: str
    state: Literal["Serving", "Installing", "Skipped", "Lost"]
    reason: str = ""
    replicas: int = 0

    def awaits_walk(self) -> bool:
        """A walk's later backend: its copy is installed when the walk reaches it (the
        reason says when); an Installing entry being installed has no reason."""
        return self.state == "Installing" and bool(self.reason)


class WorkflowRunStatus(_Observed):
    phase: Phase = Phase.PENDING
    observed_generation: int = Field(default=0, alias="observedGeneration")
    conditions: tuple[Condition, ...] = ()
    revision: str = ""
    endpoint: str = ""
    spec_digest: str = Field(default="", alias="specDigest")
    canary: CanaryStatus = Field(default_factory=CanaryStatus)
    smoke: SmokeStatus = Field(default_factory=SmokeStatus)
    analysis: AnalysisStatus = Field(default_factory=AnalysisStatus)
    shadow: ShadowStatus | None = Field(
        default=None, description="The shadow phase's latest figures; None: never shadowed."
    )
    saga_id: str = Field(default="", alias="sagaId")
    trace_id: str | None = Field(
        default=None,
        alias="traceId",
        pattern=TRACE_ID_PATTERN,
        description="The OpenTelemetry trace of the current saga; None: tracing is off.",
    )
    message: str = ""
    placement: tuple[PlacementEntry, ...] = ()


class WorkflowRun(_Model):
    api_version: Literal["plnt.work/v1"] = Field(default="plnt.work/v1", alias="apiVersion")
    kind: Literal["WorkflowRun"] = "WorkflowRun"
    metadata: ObjectMeta
    spec: WorkflowRunSpec
    status: WorkflowRunStatus | None = None

    @field_validator("metadata")
    @classmethod
    def _name_fits_subjects(cls, meta: ObjectMeta) -> ObjectMeta:
        check_run_name(meta.name)
        if meta.namespace is not None:
            check_namespace(meta.namespace)
        return meta


# --- PlntBackend -------------------------------------------------------------------------


class SecretKeyRef(_Model):
    name: str
    namespace: str | None = None
    key: str


class IpBlock(_Model):
    cidr: str = Field(examples=["10.8.0.0/16"])
    except_: list[str] = Field(default_factory=list, alias="except")

    @field_validator("cidr", "except_")
    @classmethod
    def _cidrs(cls, value: str | list[str]) -> str | list[str]:
        for cidr in [value] if isinstance(value, str) else value:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ValueError(f"{cidr!r} is not a CIDR such as 10.8.0.0/16") from None
        return value


class RunnerCaller(_Model):
    """A NetworkPolicy peer that may call a backend's runners, besides plnt's router and
    smoke pods in the runners' own cluster (which is all the chart admits by default)."""

    ip_block: IpBlock | None = Field(default=None, alias="ipBlock")
    namespace_selector: LabelSelector | None = Field(default=None, alias="namespaceSelector")
    pod_selector: LabelSelector | None = Field(default=None, alias="podSelector")

    @model_validator(mode="after")
    def _one_kind_of_peer(self) -> "RunnerCaller":
        selectors = self.namespace_selector is not None or self.pod_selector is not None
        if (self.ip_block is not None) == selectors:
            raise ValueError(
                "a runner caller is an ipBlock, or a namespaceSelector and/or podSelector"
            )
        return self


CLUSTER_DOMAIN = "svc.cluster.local"
MAX_SERVICE_DOMAIN = 200
"""Room left in a 253-character name for ``<release>.<namespace>.``."""


def service_url(*, name: str, namespace: str, port: int, domain: str = CLUSTER_DOMAIN) -> str:
    """Where plnt calls a runner's Service: its cluster's DNS name, or under a PlntBackend's
    ``serviceDomain``."""
    return f"http://{name}.{namespace}.{domain}:{port}"


class KubernetesTarget(_Model):
    kubeconfig_secret_ref: SecretKeyRef | None = Field(default=None, alias="kubeconfigSecretRef")
    in_cluster: bool = Field(default=False, alias="inCluster")
    namespace: str = "default"
    service_domain: str = Field(
        default=CLUSTER_DOMAIN,
        alias="serviceDomain",
        max_length=MAX_SERVICE_DOMAIN,
        description="The DNS suffix plnt calls this cluster's runners at: "
        "http://<release>.<namespace>.<serviceDomain>:<port>. svc.clusterset.local (with "
        "serviceExport) for a Multi-Cluster Services implementation.",
    )
    service_export: bool = Field(
        default=False,
        alias="serviceExport",
        description="Export each runner's Service to the clusterset "
        "(a multicluster.x-k8s.io/v1alpha1 ServiceExport beside it).",
    )
    runner_callers: list[RunnerCaller] = Field(
        default_factory=list,
        alias="runnerCallers",
        description="Who else may call the runners (their NetworkPolicy's ingress peers): "
        "plnt's pods when plnt runs in another cluster, e.g. its pod CIDR or gateway.",
    )

    @field_validator("service_domain")
    @classmethod
    def _a_dns_name(cls, value: str) -> str:
        if not SECRET_NAME.match(value):
            raise ValueError(
                f"{value!r} is not a DNS name such as svc.clusterset.local (lowercase "
                "letters, digits, '-' and '.', each part starting and ending alphanumeric)"
            )
        return value

    @model_validator(mode="after")
    def _one_credential_source(self) -> "KubernetesTarget":
        if self.in_cluster == (self.kubeconfig_secret_ref is not None):
            raise ValueError(
                "kubernetes needs exactly one of inCluster: true or kubeconfigSecretRef"
            )
        return self


class GpuClass(_Model):
    resource_name: str = Field(alias="resourceName", examples=["nvidia.com/gpu"])
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    capacity: int = Field(default=0, ge=0)


class LlmEndpoint(_Model):
    base_url: str = Field(
        alias="baseUrl", pattern=r"^https?://", examples=["https://api.openai.com/v1"]
    )
    model: str = Field(min_length=1)
    api_key_secret_ref: SecretKeyRef | None = Field(default=None, alias="apiKeySecretRef")
    api_key_env: str | None = Field(
        default=None,
        alias="apiKeyEnv",
        description="Local backend: the environment variable that holds the API key.",
    )
    input_price_per_mtok_usd: float | None = Field(
        default=None,
        alias="inputPricePerMTokUsd",
        ge=0,
        description="US dollars per million prompt tokens: the cost live analysis judges.",
        examples=[0.15],
    )
    output_price_per_mtok_usd: float | None = Field(
        default=None,
        alias="outputPricePerMTokUsd",
        ge=0,
        description="US dollars per million completion tokens.",
        examples=[0.6],
    )
    structured_outputs: bool = Field(
        default=False,
        alias="structuredOutputs",
        description="The endpoint takes OpenAI response_format of type json_schema: steps "
        "that ask for JSON send their schema there rather than in the system message.",
    )


class Toleration(_Model):
    key: str | None = None
    operator: Literal["Equal", "Exists"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(default=None, alias="tolerationSeconds")


class LocalObjectReference(_Model):
    name: str = Field(min_length=1)


class RunnerPod(_Model):
    """Pod settings merged into every runner a kubernetes backend installs."""

    tolerations: list[Toleration] = Field(default_factory=list)
    affinity: dict[str, Any] = Field(
        default_factory=dict, description="A Kubernetes Affinity, passed to the pod as written."
    )
    priority_class_name: str | None = Field(default=None, alias="priorityClassName")
    image_pull_secrets: list[LocalObjectReference] = Field(
        default_factory=list, alias="imagePullSecrets"
    )
    service_account_name: str | None = Field(default=None, alias="serviceAccountName")
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


DEFAULT_READY_TIMEOUT = "10m"
"""Long enough for a cold GPU node to join and pull a multi-GB runner image."""
MAX_READY_TIMEOUT_S = 6 * 3600.0


class PlntBackendSpec(_Model):
    type: Literal["local", "kubernetes"]
    kubernetes: KubernetesTarget | None = None
    gpu_classes: dict[str, GpuClass] = Field(default_factory=dict, alias="gpuClasses")
    llm: LlmEndpoint | None = None
    allowed_namespaces: LabelSelector | None = Field(
        default=None,
        alias="allowedNamespaces",
        description="Namespaces (by label) whose WorkflowRuns may use this backend; absent: all.",
    )
    allowed_images: list[str] | None = Field(
        default=None,
        alias="allowedImages",
        description="Image prefixes a workflow's runtime.image must start with; absent: any.",
    )
    runner_pod: RunnerPod = Field(default_factory=RunnerPod, alias="runnerPod")
    ready_timeout: str = Field(
        default=DEFAULT_READY_TIMEOUT,
        alias="readyTimeout",
        description="How long an installed runner may take to answer before the saga fails.",
    )

    @field_validator("ready_timeout")
    @classmethod
    def _ready_timeout_is_a_duration(cls, value: str) -> str:
        return _check_duration(value, low_s=1.0, high_s=MAX_READY_TIMEOUT_S, bounds="1s and 6h")

    @property
    def ready_timeout_s(self) -> float:
        return duration_seconds(self.ready_timeout)

    @model_validator(mode="after")
    def _kubernetes_needs_target(self) -> "PlntBackendSpec":
        if self.type == "kubernetes" and self.kubernetes is None:
            raise ValueError(
                "type kubernetes needs spec.kubernetes (inCluster or kubeconfigSecretRef)"
            )
        return self


class GpuClassCapacity(_Model):
    """One GPU class's free GPUs at ``observedAt`` (``plnt_common.capacity``)."""

    gpu_class: str = Field(alias="gpuClass", examples=["a100"])
    free: int = Field(ge=0, description="Free GPUs of the class over every node.")
    largest_free_on_one_node: int = Field(
        alias="largestFreeOnOneNode",
        ge=0,
        description="The most free on any single node: what one runner pod can get.",
    )
    observed_at: datetime = Field(alias="observedAt")


class PlntBackendStatus(_Model):
    capacity: list[GpuClassCapacity] = Field(
        default_factory=list,
        description="Free GPUs per class, observed by the installer at most 10 s apart.",
    )


class PlntBackend(_Model):
    api_version: Literal["plnt.work/v1"] = Field(default="plnt.work/v1", alias="apiVersion")
    kind: Literal["PlntBackend"] = "PlntBackend"
    metadata: ObjectMeta
    spec: PlntBackendSpec
    status: PlntBackendStatus | None = None

    @field_validator("metadata")
    @classmethod
    def _name_is_label(cls, meta: ObjectMeta) -> ObjectMeta:
        check_dns_label(meta.name, what="PlntBackend name")
        return meta


Resource = WorkflowRun | PlntBackend
KINDS: dict[str, type[WorkflowRun] | type[PlntBackend]] = {
    "WorkflowRun": WorkflowRun,
    "PlntBackend": PlntBackend,
}


def parse_resource(document: Any) -> Resource:
    """Validate one mapping as a plnt resource; raises ``SpecInvalid`` naming the problem."""
    if not isinstance(document, dict):
        raise SpecInvalid("a resource must be a mapping with apiVersion, kind, metadata and spec")
    kind = document.get("kind")
    api_version = document.get("apiVersion")
    if api_version != API_VERSION:
        raise SpecInvalid(f"apiVersion must be {API_VERSION}, not {api_version!r}")
    model = KINDS.get(str(kind))
    if model is None:
        raise SpecInvalid(f"unknown kind {kind!r} (known: {', '.join(KINDS)})")
    metadata = document.get("metadata")
    if not isinstance(metadata, dict):
        raise SpecInvalid(f"{kind}: metadata must be a mapping with a name, not {metadata!r:.40}")
    name = metadata.get("name", "?")
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        raise SpecInvalid(f"{kind} {name!r}: {describe_validation_error(exc)}") from None
    except SpecInvalid as exc:
        raise SpecInvalid(f"{kind} {name!r}: {exc}") from None
