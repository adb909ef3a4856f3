"""Settings shared by every service; each service subclasses with its own env prefix.

``PLNT_NATS_URL`` (one or several servers, comma separated) and ``PLNT_NATS_REPLICAS``
are read by every service, ``PLNT_LOG_LEVEL`` and ``PLNT_LOG_FORMAT`` by all of them
too, and so are the bus's liveness and retention settings (``BusSettings``). Service
settings use ``PLNT_<SERVICE>_``. No module reads ``os.environ``.
"""

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AliasChoices, BeforeValidator, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"

_DURATION = re.compile(r"^(?P<number>[0-9]+(\.[0-9]+)?)(?P<unit>ms|s|m|h|d)?$")
_DURATION_UNITS_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}
_SIZE = re.compile(r"^(?P<number>[0-9]+(\.[0-9]+)?)\s*(?P<unit>B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?$")
_SIZE_UNITS = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}


def duration_s(value: object) -> float:
    """Seconds of ``500ms``, ``5s``, ``10m``, ``1h``, ``30d`` or a bare number of seconds;
    ValueError otherwise."""
    if isinstance(value, (int, float)):
        return float(value)
    match = _DURATION.match(str(value).strip())
    if match is None:
        raise ValueError(f"must be a duration like 5s, 10m, 1h or 30d, got {value!r}")
    return float(match["number"]) * _DURATION_UNITS_S[match["unit"] or "s"]


def size_bytes(value: object) -> int:
    """Bytes of ``8GiB``, ``500MB``, ``1048576`` (a bare number is bytes); ValueError
    otherwise."""
    if isinstance(value, int):
        return value
    match = _SIZE.match(str(value).strip())
    if match is None:
        raise ValueError(f"must be a size like 8GiB, 500MiB or 1048576, got {value!r}")
    return int(float(match["number"]) * _SIZE_UNITS[match["unit"] or "B"])


Duration = Annotated[float, BeforeValidator(duration_s)]
"""Seconds, written as ``5s``, ``30d`` or a number."""
Size = Annotated[int, BeforeValidator(size_bytes)]
"""Bytes, written as ``8GiB``, ``500MB`` or a number."""


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
    nats_ping_interval: Duration = Field(
        default=5.0,
        gt=0,
        validation_alias=AliasChoices("PLNT_NATS_PING_INTERVAL", "nats_ping_interval"),
        description="How often the client pings its server (e.g. 5s). With "
        "PLNT_NATS_MAX_OUTSTANDING_PINGS unanswered pings the connection is taken for dead "
        "and the client reconnects to another server: a frozen node is left within about "
        "interval x (outstanding pings + 1).",
    )
    nats_max_outstanding_pings: int = Field(
        default=2,
        ge=1,
        le=10,
        validation_alias=AliasChoices(
            "PLNT_NATS_MAX_OUTSTANDING_PINGS", "nats_max_outstanding_pings"
        ),
        description="Unanswered pings after which the connection is dropped and re-made.",
    )
    events_max_age: Duration = Field(
        default=30 * 86_400.0,
        ge=0,
        validation_alias=AliasChoices("PLNT_EVENTS_MAX_AGE", "events_max_age"),
        description="How long PLNT_EVENTS keeps an event (e.g. 30d; 0: for ever). The "
        "oldest events go first; `plnt replay` rebuilds only what the stream still holds.",
    )
    events_max_bytes: Size = Field(
        default=0,
        ge=0,
        validation_alias=AliasChoices("PLNT_EVENTS_MAX_BYTES", "events_max_bytes"),
        description="Most bytes PLNT_EVENTS holds (e.g. 8GiB; 0: no limit); past it the "
        "oldest events are removed.",
    )
    buckets_max_bytes: Size = Field(
        default=0,
        ge=0,
        validation_alias=AliasChoices("PLNT_BUCKETS_MAX_BYTES", "buckets_max_bytes"),
        description="Most bytes each KV bucket and the plnt-specs object store holds (0: no "
        "limit). A full bucket refuses writes (BusFull) until room frees.",
    )
    shadow_max_bytes: Size = Field(
        default=2**30,
        ge=0,
        validation_alias=AliasChoices("PLNT_SHADOW_MAX_BYTES", "shadow_max_bytes"),
        description="Most bytes PLNT_SHADOW (the router's mirrored pairs, kept a day) holds "
        "(default 1GiB; 0: no limit); past it the oldest pairs are removed.",
    )
    sagas_max_age: Duration = Field(
        default=30 * 86_400.0,
        ge=0,
        validation_alias=AliasChoices("PLNT_SAGAS_MAX_AGE", "sagas_max_age"),
        description="How long plnt-sagas keeps an entry (0: for ever): terminal claims, "
        "their publication records and the durables' positions (rewritten every 30 s while "
        "a service runs). Keep it at least PLNT_EVENTS_MAX_AGE.",
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


@dataclass(frozen=True)
class Limit:
    """One retention limit: its value, and whether the operator set it (else the default)."""

    value: float
    explicit: bool


@dataclass(frozen=True)
class BusSettings:
    """The bus's liveness and retention settings, as provisioning and ``connect`` use them."""

    ping_interval_s: float = 5.0
    max_outstanding_pings: int = 2
    events_max_age_s: Limit = Limit(30 * 86_400.0, explicit=False)
    events_max_bytes: Limit = Limit(0, explicit=False)
    buckets_max_bytes: Limit = Limit(0, explicit=False)
    shadow_max_bytes: Limit = Limit(2**30, explicit=False)
    sagas_max_age_s: Limit = Limit(30 * 86_400.0, explicit=False)


def bus_settings() -> BusSettings:
    """``BusSettings`` from the environment (``PLNT_NATS_PING_INTERVAL``, ...)."""
    settings = CommonSettings()
    given = settings.model_fields_set

    def limit(field: str) -> Limit:
        return Limit(float(getattr(settings, field)), explicit=field in given)

    return BusSettings(
        ping_interval_s=settings.nats_ping_interval,
        max_outstanding_pings=settings.nats_max_outstanding_pings,
        events_max_age_s=limit("events_max_age"),
        events_max_bytes=limit("events_max_bytes"),
        buckets_max_bytes=limit("buckets_max_bytes"),
        shadow_max_bytes=limit("shadow_max_bytes"),
        sagas_max_age_s=limit("sagas_max_age"),
    )
