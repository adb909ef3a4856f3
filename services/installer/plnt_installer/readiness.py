"""Whether a runner Deployment serves its release: a pure verdict on observed status.

The Helm backend does not trust ``helm --wait``: it reads the Deployment from the
Kubernetes API and asks ``judge`` here, like ``kubectl rollout status`` does: the
controller has seen the current spec (``observedGeneration``), every replica runs the
current template (``updatedReplicas``) and is ready (``readyReplicas``). Reading the API
and waiting are the adapter's business, not this module's.
"""

from dataclasses import dataclass

PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"


@dataclass(frozen=True, kw_only=True)
class DeploymentState:
    """What the API reports about one Deployment (and, when read, its pods)."""

    generation: int
    observed_generation: int
    desired: int
    """``spec.replicas``."""
    updated: int = 0
    ready: int = 0
    progressing_reason: str = ""
    """``reason`` of the Progressing condition when its status is False."""
    pod_problems: tuple[str, ...] = ()
    """One line per pod that is not running, e.g. ``runner-x: ImagePullBackOff: ...``."""


@dataclass(frozen=True, kw_only=True)
class Readiness:
    ready: bool
    failed: bool = False
    """The rollout cannot finish by waiting (the controller gave up)."""
    message: str
    """What was observed, for the log and an ``InstallFailed`` message."""


def judge(state: DeploymentState | None) -> Readiness:
    """The verdict on ``state``; None means the Deployment does not exist (yet)."""
    if state is None:
        return Readiness(ready=False, message="Deployment not found")
    figures = f"readyReplicas {state.ready}/{state.desired}"
    if state.observed_generation < state.generation:
        message = (
            f"generation {state.generation} not observed yet "
            f"(observedGeneration {state.observed_generation}), {figures}"
        )
        return Readiness(ready=False, message=_with_pods(message, state))
    if state.progressing_reason == PROGRESS_DEADLINE_EXCEEDED:
        message = f"rollout exceeded its progress deadline, {figures}"
        return Readiness(ready=False, failed=True, message=_with_pods(message, state))
    if state.updated < state.desired:
        message = f"updatedReplicas {state.updated}/{state.desired}, {figures}"
        return Readiness(ready=False, message=_with_pods(message, state))
    if state.ready < state.desired:
        return Readiness(ready=False, message=_with_pods(figures, state))
    return Readiness(ready=True, message=figures)


def _with_pods(message: str, state: DeploymentState) -> str:
    if not state.pod_problems:
        return message
    return f"{message}; pods: {'; '.join(state.pod_problems)}"
