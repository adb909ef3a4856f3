"""Releases of the local backend in ``plnt-releases``: desired state in, observed state out.

Keys: ``desired.<namespace>.<release>`` written by the installer only, and
``observed.<namespace>.<release>`` written by the local-backend only, so neither write
races the other. ``observed-kube.<namespace>.<release>`` is what the installer observes of
its Helm releases (Service endpoints), in the same shape; the local-backend never reads
it. A release is one runner serving one revision of one WorkflowRun.
"""

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

DESIRED_PREFIX = "desired"
OBSERVED_PREFIX = "observed"
KUBE_OBSERVED_PREFIX = "observed-kube"


def release_name(run_name: str, generation: int) -> str:
    """``<run>-g<generation>``: a DNS-1123 label of at most 53 characters (Helm's limit)."""
    return f"{run_name}-g{generation}"


def revision_label(version: str, generation: int) -> str:
    """The revision users see: workflow version plus the generation that rolled it out."""
    return f"{version}-g{generation}"


def desired_key(namespace: str, release: str) -> str:
    return f"{DESIRED_PREFIX}.{namespace}.{release}"


def observed_key(namespace: str, release: str) -> str:
    return f"{OBSERVED_PREFIX}.{namespace}.{release}"


def kube_observed_key(namespace: str, release: str) -> str:
    return f"{KUBE_OBSERVED_PREFIX}.{namespace}.{release}"


def run_of_release(release: str) -> str:
    """The WorkflowRun a release belongs to: ``release_name`` undone."""
    return release.rsplit("-g", 1)[0]


def release_of_revision(run_name: str, revision: str) -> str:
    """The release that serves ``revision`` of ``run_name`` (``revision_label`` undone)."""
    return f"{run_name}-g{revision.rsplit('-g', 1)[-1]}"


class ReleaseRole(StrEnum):
    CANARY = "canary"
    """Installed by a saga, not yet promoted."""
    STABLE = "stable"
    """Promoted: serves the route's stable share."""
    PREVIOUS = "previous"
    """The stable before the latest promotion, kept at 0 % for spec.rollback.keepPreviousFor."""


class LlmConfig(BaseModel):
    """The OpenAI-compatible endpoint runner steps call; empty base_url means offline."""

    model_config = ConfigDict(frozen=True)

    base_url: str = ""
    model: str = ""
    api_key_env: str | None = None
    input_price_per_mtok_usd: float = 0.0
    """US dollars per million prompt tokens; 0 counts calls as free."""
    output_price_per_mtok_usd: float = 0.0
    structured_outputs: bool = False
    """The endpoint takes OpenAI ``response_format`` json_schema (runner setting
    ``PLNT_RUNNER_LLM_STRUCTURED_OUTPUTS``)."""


class DesiredRelease(BaseModel):
    """What the installer asks a backend to run."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    run_name: str
    release: str
    revision: str
    role: ReleaseRole = ReleaseRole.CANARY
    saga_id: str
    spec_digest: str = Field(description="Object name of the spec in plnt-specs.")
    workflow_name: str
    replicas: int = 1
    gpu_class: str | None = None
    gpu_count: int = 0
    llm: LlmConfig = Field(default_factory=LlmConfig)


class ReleasePhase(StrEnum):
    STARTING = "Starting"
    READY = "Ready"
    FAILED = "Failed"
    """The runner cannot start (e.g. its spec is missing); restarting will not help."""


class ObservedRelease(BaseModel):
    """What the backend reports about a release."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    release: str
    revision: str
    saga_id: str
    phase: ReleasePhase
    url: str = ""
    pid: int = 0
    restarts: int = 0
    message: str = ""
    reason: str = Field(
        default="", description="Why it is not ready, when the backend can say (a Reason)."
    )
