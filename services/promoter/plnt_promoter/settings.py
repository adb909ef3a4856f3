"""Promoter settings: ``PLNT_PROMOTER_*`` plus the shared ``PLNT_ROUTER_PUBLIC_URL``."""

from pydantic import Field
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
