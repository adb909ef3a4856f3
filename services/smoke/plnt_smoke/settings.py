"""Smoke settings, ``PLNT_SMOKE_*``."""

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from plnt_common.settings import CommonSettings


class SmokeSettings(CommonSettings):
    model_config = SettingsConfigDict(env_prefix="PLNT_SMOKE_", extra="ignore")

    concurrency: int = Field(
        default=4, ge=1, le=256, description="Smoke invocations in flight per canary."
    )
    request_timeout_s: float = Field(
        default=30.0, gt=0, description="Per-invocation timeout; a timeout counts as an error."
    )
    sagas: int = Field(default=8, ge=1, description="Canaries smoke-tested at once per replica.")
