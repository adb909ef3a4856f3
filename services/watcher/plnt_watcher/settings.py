"""Watcher settings, ``PLNT_WATCHER_*``."""

import os
import socket
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from plnt_common.settings import CommonSettings


class WatcherSettings(CommonSettings):
    model_config = SettingsConfigDict(env_prefix="PLNT_WATCHER_", extra="ignore")

    source: Literal["embedded", "kubernetes"] = Field(
        default="embedded",
        description="Where WorkflowRuns come from: plnt-resources, or the Kubernetes API.",
    )
    concurrency: int = Field(
        default=64, ge=1, description="Runs whose events are folded at once per replica."
    )
    status_linger_s: float = Field(
        default=0.05,
        ge=0,
        description=(
            "How long a step's status waits for the run's next event, which then writes "
            "the newer status instead (0: write every step's). Ends are written at once."
        ),
    )
    deadline_pulling_s: float = Field(
        default=180.0, gt=0, description="Longest a spec pull may take."
    )
    deadline_installing_s: float = Field(
        default=300.0, gt=0, description="Longest a canary install may take."
    )
    deadline_smoking_s: float = Field(
        default=300.0, gt=0, description="Longest a smoke test may take."
    )
    deadline_progressing_s: float = Field(
        default=120.0,
        gt=0,
        description="Longest a canary step may run past its own hold (its stepInterval "
        "plus the bounded wait for traffic), and a shadow phase past its maxDuration: "
        "covers a promoter restart and redelivery.",
    )
    deadline_promoting_s: float = Field(
        default=60.0, gt=0, description="Longest a promotion may take."
    )
    deadline_check_interval_s: float = Field(
        default=1.0, gt=0, description="How often deadlines are checked."
    )
    replace_lost_after_s: float = Field(
        default=30.0,
        gt=0,
        description="How long a run with spec.placement.failover may have its runner "
        "reported lost (RunnerFailed, NoReadyPods, BackendUnreachable) before it is replaced "
        "on the next "
        "backend that fits.",
    )

    # --- kubernetes source (PLNT_WATCHER_SOURCE=kubernetes) -------------------------------
    kubeconfig: str = Field(
        default="",
        description="Path of a kubeconfig file; empty = standard resolution: the KUBECONFIG "
        "variable or ~/.kube/config, else the in-cluster service account.",
    )
    kube_context: str = Field(
        default="", description="kubeconfig context to use; empty = its current-context."
    )
    kube_namespace: str = Field(
        default="", description="Watch WorkflowRuns in this namespace only; empty = all."
    )
    kube_watch_timeout_s: int = Field(
        default=300,
        gt=0,
        description="Server-side timeout of one watch request; the watch then resumes from "
        "its last resourceVersion.",
    )
    kube_request_timeout_s: float = Field(
        default=30.0, gt=0, description="Timeout of one non-watch API request."
    )
    kube_list_page_size: int = Field(
        default=500,
        ge=0,
        description="WorkflowRuns per page of a list (limit/continue); 0 = one unpaginated list.",
    )
    kube_events: bool = Field(
        default=True, description="Record a Kubernetes Event on every WorkflowRun phase change."
    )
    # --- leader election (kubernetes source only) ---------------------------------------
    leader_election: bool = Field(
        default=True,
        description="Only the Lease holder turns resource changes into sagas; the other "
        "replicas still fold events and write status.",
    )
    lease_name: str = Field(default="plnt-watcher", description="Name of the Lease.")
    lease_namespace: str = Field(default="default", description="Namespace of the Lease.")
    lease_duration_s: float = Field(
        default=15.0,
        gt=0,
        description="How long followers wait after the last renewal before taking over.",
    )
    lease_renew_deadline_s: float = Field(
        default=10.0,
        gt=0,
        description="A leader that could not renew for this long steps down; below the "
        "lease duration so it stops before anyone else may start.",
    )
    lease_retry_period_s: float = Field(
        default=2.0, gt=0, description="How often the Lease is renewed or tried."
    )
    lease_identity: str = Field(
        default="", description="This replica's holder identity; empty = <hostname>-<pid>."
    )

    @model_validator(mode="after")
    def _lease_timing(self) -> "WatcherSettings":
        if not (self.lease_retry_period_s < self.lease_renew_deadline_s < self.lease_duration_s):
            raise ValueError(
                "lease timing must keep retry period < renew deadline < lease duration"
            )
        return self

    def identity(self) -> str:
        """This replica's name as a Lease holder and in its API User-Agent."""
        return self.lease_identity or f"{socket.gethostname()}-{os.getpid()}"

    def deadlines(self) -> dict[str, float]:
        return {
            "Pulling": self.deadline_pulling_s,
            "Installing": self.deadline_installing_s,
            "Smoking": self.deadline_smoking_s,
            "Progressing": self.deadline_progressing_s,
            # past spec.canary.shadow.maxDuration (the promoter ends the phase by then)
            "Shadowing": self.deadline_progressing_s,
            "Promoting": self.deadline_promoting_s,
        }
