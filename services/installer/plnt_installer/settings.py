"""Installer settings, ``PLNT_INSTALLER_*``."""

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from plnt_common.settings import CommonSettings


class InstallerSettings(CommonSettings):
    model_config = SettingsConfigDict(env_prefix="PLNT_INSTALLER_", extra="ignore")

    ready_timeout_s: float = Field(
        default=120.0, gt=0, description="How long a canary may take to become ready."
    )
    uninstall_timeout_s: float = Field(
        default=30.0, gt=0, description="How long removing a release may take."
    )
    concurrency: int = Field(default=16, ge=1, description="Events handled at once per replica.")
