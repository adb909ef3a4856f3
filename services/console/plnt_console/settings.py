"""The console's settings: ``PLNT_CONSOLE_*`` variables on top of the shared ``PLNT_*`` ones."""

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from plnt_common.settings import CommonSettings


class ConsoleSettings(CommonSettings):
    """Where the console listens and the token it asks for off loopback."""

    model_config = SettingsConfigDict(env_prefix="PLNT_CONSOLE_", extra="ignore")

    host: str = Field(
        default="127.0.0.1",
        description="Interface to listen on; an address other than loopback needs a token.",
    )
    port: int = Field(default=8081, ge=0, le=65535, description="TCP port; 0 picks a free one.")
    token: SecretStr | None = Field(
        default=None,
        description=(
            "PLNT_CONSOLE_TOKEN: asked of every request (Authorization: Bearer, or the "
            "cookie the page sets from ?token=); required on a non-loopback host."
        ),
    )
