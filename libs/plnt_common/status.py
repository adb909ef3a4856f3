"""Phases, condition types and reasons of a WorkflowRun, reused by the CRD status."""

from enum import StrEnum


class Phase(StrEnum):
    """Where a WorkflowRun's saga stands."""

    PENDING = "Pending"
    """Accepted; the saga has not started."""
    PULLING = "Pulling"
    """The puller fetches, verifies and validates the spec."""
    INSTALLING = "Installing"
    """The installer brings up the canary runner."""
    SMOKING = "Smoking"
    """The smoke service tests the canary against its budgets."""
    SHADOWING = "Shadowing"
    """Live calls are mirrored to the canary, which takes none, and its answers compared."""
    PROGRESSING = "Progressing"
    """Stepped canary: each weight of spec.canary.steps is held while live calls are judged."""
    PAUSED = "Paused"
    """Manual gate: every step passed; the canary waits for `plnt promote` (or an abort)."""
    PROMOTING = "Promoting"
    """The promoter moves all traffic to the canary."""
    READY = "Ready"
    """The new revision serves 100% of traffic."""
    ROLLING_BACK = "RollingBack"
    """The canary is being removed; the previous revision keeps serving."""
    ROLLED_BACK = "RolledBack"
    """The canary is gone; the previous revision serves."""
    FAILED = "Failed"
    """The saga stopped; nothing was left to compensate."""
    REVERTED = "Reverted"
    """Traffic went back to the kept previous revision (the guard or `plnt rollback`)."""
    DELETING = "Deleting"
    """Routes and releases are being removed before the resource goes away."""

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_PHASES


TERMINAL_PHASES = frozenset({Phase.READY, Phase.ROLLED_BACK, Phase.FAILED, Phase.REVERTED})


class ConditionType(StrEnum):
    """Kubernetes-shaped conditions a WorkflowRun reports."""

    SPEC_PULLED = "SpecPulled"
    """The spec was fetched, verified and stored by digest."""
    CANARY_INSTALLED = "CanaryInstalled"
    """The canary runner is up."""
    SMOKE_PASSED = "SmokePassed"
    """The canary met its latency and error budgets."""
    PROMOTED = "Promoted"
    """All traffic goes to the new revision."""
    READY = "Ready"
    """The run serves its current generation."""
    SERVING = "Serving"
    """Live, not saga history: every routed runner is up where the route points."""


class Reason(StrEnum):
    """Machine-readable reasons on conditions and failure events."""

    PROGRESSING = "Progressing"
    SUCCEEDED = "Succeeded"
    SPEC_INVALID = "SpecInvalid"
    SPEC_NOT_FOUND = "SpecNotFound"
    INTEGRITY_MISMATCH = "IntegrityMismatch"
    REGISTRY_UNAVAILABLE = "RegistryUnavailable"
    BACKEND_UNAVAILABLE = "BackendUnavailable"
    INSTALL_FAILED = "InstallFailed"
    CODE_INVALID = "CodeInvalid"
    """The workflow's code archive is missing, does not match its digest, or is unsafe."""
    DEPENDENCIES_FAILED = "DependenciesFailed"
    """pip could not install a requirement of the workflow's code."""
    SIGNATURE_MISSING = "SignatureMissing"
    """The run requires a signature (``verify.publicKeys``) and the spec has none."""
    SIGNATURE_INVALID = "SignatureInvalid"
    """The spec's signature is malformed, by an untrusted key, or does not match its bytes."""
    PULL_SECRET_INVALID = "PullSecretInvalid"
    """The run's ``pullSecret`` is missing, not a dockerconfigjson Secret, or unusable here."""
    SMOKE_FAILED = "SmokeFailed"
    ANALYSIS_FAILED = "AnalysisFailed"
    SHADOW_FAILED = "ShadowFailed"
    """The canary's mirrored answers broke a spec.canary.shadow budget (or came too few)."""
    SUPERSEDED = "Superseded"
    STEP_TIMED_OUT = "StepTimedOut"
    DELIVERY_EXHAUSTED = "DeliveryExhausted"
    DELETED = "Deleted"
    ABORTED = "Aborted"
    """An operator aborted the in-flight canary (`plnt abort`, annotation plnt.work/abort)."""
    ROLLBACK_REQUESTED = "RollbackRequested"
    """An operator moved traffic back to the previous revision (`plnt rollback`)."""
    GUARD_FAILED = "GuardFailed"
    """The promoted revision broke a guard budget; traffic went back to the previous one."""
    RUNNER_CONTRACT = "RunnerContract"
    """The canary missed a clause of the runner contract (docs/runner-contract.md)."""
    BACKEND_NOT_ALLOWED = "BackendNotAllowed"
    """The PlntBackend refuses the run's namespace (allowedNamespaces) or image (allowedImages)."""
    NO_CAPACITY = "NoCapacity"
    """No node of the PlntBackend has the GPUs the canary needs: Pending until some frees."""


class ServingReason(StrEnum):
    """Reasons of the live ``Serving`` condition, from what the backend observes."""

    RUNNER_READY = "RunnerReady"
    """Every routed runner is ready at the address its route points to."""
    RUNNER_STARTING = "RunnerStarting"
    """A routed runner exited or is not ready yet; the backend is (re)starting it."""
    RUNNER_FAILED = "RunnerFailed"
    """The backend gave up on a routed runner; a new rollout is needed."""
    NO_READY_PODS = "NoReadyPods"
    """The release's Service has no ready endpoint (Kubernetes)."""
    BACKEND_UNREACHABLE = "BackendUnreachable"
    """The cluster's API is silent and the runner does not answer at its address."""
