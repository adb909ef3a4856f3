"""Watcher settings, ``PLNT_WATCHER_*``."""

from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from plnt_common.settings import CommonSettings


class WatcherSettings(CommonSettings):
    model_config = SettingsConfigDict(env_prefix="PLNT_WATCHER_", extra="ignore")

    source: Literal["embedded", "kubernetes"] = Field(
        default="embedded",
        description="Where WorkflowRuns come from: plnt-resources, or the Kubernetes API.",
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
    deadline_promoting_s: float = Field(
        default=60.0, gt=0, description="Longest a promotion may take."
    )
    deadline_check_interval_s: float = Field(
        default=1.0, gt=0, description="How often deadlines are checked."
    )

    def deadlines(self) -> dict[str, float]:
        return {
            "Pulling": self.deadline_pulling_s,
            "Installing": self.deadline_installing_s,
            "Smoking": self.deadline_smoking_s,
            "Promoting": self.deadline_promoting_s,
        }
