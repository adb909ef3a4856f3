"""Installer settings, ``PLNT_INSTALLER_*``."""

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from plnt_common.settings import CommonSettings

IMAGE_RUNNER_CHART = Path("/opt/plnt/charts/plnt-runner")
"""Where the image keeps the chart (see the Dockerfile)."""


def _default_runner_chart() -> Path:
    """The repository's chart when running from a checkout, else the image's."""
    checkout = Path(__file__).resolve().parents[3] / "charts" / "plnt-runner"
    return checkout if (checkout / "Chart.yaml").is_file() else IMAGE_RUNNER_CHART


class InstallerSettings(CommonSettings):
    model_config = SettingsConfigDict(env_prefix="PLNT_INSTALLER_", extra="ignore")

    ready_timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="A cap on every backend's spec.readyTimeout (how long a canary may "
        "take to serve), in seconds; unset: each backend's own (default 10m).",
    )
    uninstall_timeout_s: float = Field(
        default=30.0, gt=0, description="How long removing a release may take."
    )
    concurrency: int = Field(default=16, ge=1, description="Events handled at once per replica.")
    runner_chart: Path = Field(
        default_factory=_default_runner_chart,
        description="Directory of the plnt-runner chart the kubernetes backend installs "
        "per revision (default: the checkout's charts/plnt-runner, else the image's "
        "/opt/plnt/charts/plnt-runner).",
    )
    capacity_interval_s: float = Field(
        default=5.0,
        gt=0,
        le=10,
        description="How often every PlntBackend's free GPUs are observed into "
        "plnt-capacity (at most 10 s, so the view is never older).",
    )
    capacity_retry_s: float = Field(
        default=5.0,
        gt=0,
        description="How soon a canary that fits no node (the run Pending, NoCapacity) "
        "is tried again.",
    )
    backend_unreachable_after_s: float = Field(
        default=15.0,
        gt=0,
        description="How long a kubernetes PlntBackend's API may stay silent before its "
        "releases are probed at their address (GET /healthz); one that does not answer is "
        "reported down, reason BackendUnreachable (lost, for spec.placement.failover).",
    )
    backends: Literal["embedded", "kubernetes"] = Field(
        default="embedded",
        description="Where the Helm backend finds kubernetes PlntBackends (to locate a "
        "release again for rollback and removal): the plnt-resources store of the embedded "
        "mode, or the Kubernetes API (cluster-scoped plntbackends.plnt.work).",
    )
    kubeconfig: str = Field(
        default="",
        description="With backends=kubernetes: path of a kubeconfig file to read "
        "PlntBackends with; empty = standard resolution: the KUBECONFIG variable or "
        "~/.kube/config, else the in-cluster service account. Only PlntBackends are read "
        "with it: Helm on inCluster backends and kubeconfig Secret reads keep the standard "
        "resolution.",
    )
