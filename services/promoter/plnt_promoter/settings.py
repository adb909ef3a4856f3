"""Promoter settings: ``PLNT_PROMOTER_*`` plus the shared ``PLNT_ROUTER_PUBLIC_URL``."""

from typing import Literal, Self

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from plnt_common.settings import CommonSettings


class PromoterSettings(CommonSettings):
    model_config = SettingsConfigDict(env_prefix="PLNT_PROMOTER_", extra="ignore")

    concurrency: int = Field(default=16, ge=1, description="Events handled at once per replica.")
    follow_resync_s: float = Field(
        default=5.0,
        gt=0,
        description="Between two sweeps of the route follower over every route (retries a "
        "route write that failed); changes themselves are followed as they happen.",
    )
    shadow_check_s: float = Field(
        default=5.0,
        gt=0,
        description="Between two checks of a shadow phase (its pairs re-read, new ones scored).",
    )
    figures: Literal["bus", "prometheus"] = Field(
        default="bus",
        description="Where live analysis reads its figures: the totals routers publish on "
        "the bus, or Prometheus (which must scrape the routers).",
    )
    prometheus_url: str = Field(
        default="",
        description="Prometheus base URL, e.g. http://prometheus:9090, when figures is prometheus.",
    )

    @model_validator(mode="after")
    def _prometheus_needs_url(self) -> Self:
        if self.figures == "prometheus" and not self.prometheus_url:
            raise ValueError(
                "PLNT_PROMOTER_FIGURES=prometheus needs PLNT_PROMOTER_PROMETHEUS_URL "
                "(e.g. http://prometheus:9090)"
            )
        return self
