"""Installer settings, ``PLNT_INSTALLER_*``."""

from pathlib import Path

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

    ready_timeout_s: float = Field(
        default=120.0, gt=0, description="How long a canary may take to become ready."
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
