"""Settings shared by every service; each service subclasses with its own env prefix.

``PLNT_NATS_URL`` (one or several servers, comma separated) and ``PLNT_NATS_REPLICAS``
are read by every service, ``PLNT_LOG_LEVEL`` and ``PLNT_LOG_FORMAT`` by all of them
too. Service settings use ``PLNT_<SERVICE>_``. No module reads ``os.environ``.
"""

from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"


class CommonSettings(BaseSettings):
    """Settings every process reads, without a service prefix."""

    model_config = SettingsConfigDict(env_prefix="PLNT_", extra="ignore")

    nats_url: str = Field(
        default=DEFAULT_NATS_URL,
        validation_alias=AliasChoices("PLNT_NATS_URL", "nats_url"),
        description="NATS server URL(s), comma separated.",
    )
    nats_replicas: int = Field(
        default=1,
        ge=1,
        le=5,
        validation_alias=AliasChoices("PLNT_NATS_REPLICAS", "nats_replicas"),
        description="Replicas of every stream, KV bucket and object store plnt provisions "
        "(3 on a 3-node NATS cluster). Set, provisioning also brings existing ones to it; "
        "unset, it creates with 1 and leaves existing ones as they are.",
    )
    log_level: str = Field(
        default="info",
        validation_alias=AliasChoices("PLNT_LOG_LEVEL", "log_level"),
        description="debug, info, warning or error.",
    )
    log_format: Literal["json", "console"] = Field(
        default="json",
        validation_alias=AliasChoices("PLNT_LOG_FORMAT", "log_format"),
        description="json for machines (default), console for people.",
    )
    router_public_url: str = Field(
        default="http://127.0.0.1:8080",
        validation_alias=AliasChoices("PLNT_ROUTER_PUBLIC_URL", "router_public_url"),
        description="Base URL consumers use to reach the router; status.endpoint starts with it.",
    )
    metrics_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Serve Prometheus /metrics on this port (0 = off). Read with the "
        "service's prefix, e.g. PLNT_INSTALLER_METRICS_PORT.",
    )


def replicas_setting() -> int | None:
    """``PLNT_NATS_REPLICAS`` when it is set, else None (leave existing replicas alone)."""
    settings = CommonSettings()
    return settings.nats_replicas if "nats_replicas" in settings.model_fields_set else None
