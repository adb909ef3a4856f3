"""Releases of the local backend in ``plnt-releases``: desired state in, observed state out.

Keys: ``desired.<namespace>.<release>`` written by the installer only, and
``observed.<namespace>.<release>`` written by the local-backend only, so neither write
races the other. ``observed-kube.<namespace>.<release>`` is what the installer observes of
its Helm releases (Service endpoints), in the same shape; the local-backend never reads
it. A release is one runner serving one revision of one WorkflowRun.
"""

import hashlib
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

DESIRED_PREFIX = "desired"
OBSERVED_PREFIX = "observed"
KUBE_OBSERVED_PREFIX = "observed-kube"


HELM_RELEASE_NAME_MAX = 53
"""Helm refuses longer release names (it appends suffixes to make object names)."""
_HASH_LEN = 8


def release_name(namespace: str, run_name: str, generation: int) -> str:
    """``<namespace>-<run>-g<generation>``: one release per namespace, run and generation.

    A DNS-1123 label of at most 53 characters (Helm's limit): a longer name keeps its
    head, cut to make room, and ends with ``-<8 hex>``, a hash of the whole name, so two
    long names that share a head still differ. Never parse a run back out of it: records
    carry ``namespace`` and ``run_name``.
    """
    return _bounded(f"{namespace}-{run_name}-g{generation}")


def spread_release_name(namespace: str, run_name: str, generation: int, backend: str) -> str:
    """The release of a generation on a further backend of ``spec.placement.spread``:
    ``release_name`` plus ``-<backend>``, bounded the same way. Names differ per backend
    because one plnt keys every backend's releases by namespace and name."""
    return _bounded(f"{namespace}-{run_name}-g{generation}-{backend}")


def _bounded(full: str) -> str:
    if len(full) <= HELM_RELEASE_NAME_MAX:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:_HASH_LEN]
    head = full[: HELM_RELEASE_NAME_MAX - _HASH_LEN - 1].rstrip("-")
    return f"{head}-{digest}"


def revision_label(version: str, generation: int) -> str:
    """The revision users see: workflow version plus the generation that rolled it out."""
    return f"{version}-g{generation}"


def desired_key(namespace: str, release: str) -> str:
    return f"{DESIRED_PREFIX}.{namespace}.{release}"


def observed_key(namespace: str, release: str) -> str:
    return f"{OBSERVED_PREFIX}.{namespace}.{release}"


def kube_observed_key(namespace: str, release: str) -> str:
    return f"{KUBE_OBSERVED_PREFIX}.{namespace}.{release}"


def may_be_release_of(release: str, *, namespace: str, run_name: str) -> bool:
    """Whether ``release`` can be a ``release_name`` (or ``spread_release_name``) of
    ``namespace``/``run_name``: a cheap filter before reading a release's records, which
    say for sure (a hashed name's head may be shared by other runs)."""
    head = f"{namespace}-{run_name}-g"
    generation = release[len(head) :].partition("-")[0]
    if release.startswith(head) and generation.isdigit():
        return True  # the generation's release, or a spread one (``-<backend>``)
    legacy = f"{run_name}-g"  # named by a plnt older than namespaced names: still the run's
    if release.startswith(legacy) and release[len(legacy) :].isdigit():
        return True
    cut, dash, digest = release[:-_HASH_LEN], release[-_HASH_LEN - 1], release[-_HASH_LEN:]
    if len(release) != HELM_RELEASE_NAME_MAX or dash != "-" or not _is_hex(digest):
        return False
    return head.startswith(cut[:-1]) or cut[:-1].startswith(head)


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def run_of_release(release: str, *, namespace: str) -> str:
    """The WorkflowRun of an unhashed ``release_name`` in ``namespace``; "" when unknown.

    Only for records that predate ``ObservedRelease.run_name``: a hashed name has lost the
    run's full name, and a name of another namespace is not this namespace's run.
    """
    head, sep, generation = release.rpartition("-g")
    prefix = f"{namespace}-"
    if not sep or not generation.isdigit() or not head.startswith(prefix):
        return ""
    run = head[len(prefix) :]
    return run if release_name(namespace, run, int(generation)) == release else ""


def release_of_revision(namespace: str, run_name: str, revision: str) -> str:
    """The release that serves ``revision`` of ``namespace``/``run_name``.

    ``revision_label`` undone for its generation, then named again: hashing is
    deterministic, so this holds for long names too.
    """
    generation = revision.rsplit("-g", 1)[-1]
    if not generation.isdigit():
        return ""
    return release_name(namespace, run_name, int(generation))


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
    backend_name: str = ""
    """The PlntBackend it was installed onto (empty in records written before it was kept):
    whose gpuClasses' capacity it counts against."""


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
    run_name: str = Field(
        default="",
        description="The WorkflowRun it serves (empty in records written before it was kept).",
    )
    url: str = ""
    pid: int = 0
    restarts: int = 0
    message: str = ""
    reason: str = Field(
        default="", description="Why it is not ready, when the backend can say (a Reason)."
    )
    backend_name: str = Field(
        default="",
        description="The PlntBackend that reports it: the local-backend process whose "
        "start-up cleanup may remove it, or the cluster the Helm observer reads (empty in "
        "records written before it was kept).",
    )
