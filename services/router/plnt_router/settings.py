"""The router's settings: ``PLNT_ROUTER_*`` variables on top of the shared ``PLNT_*`` ones.

Read once at start-up by ``app.main``; nothing else in the router reads the environment.
The Helm chart's ``router`` values map one to one onto these variables.
"""

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from plnt_common.settings import CommonSettings

MIB = 1024 * 1024


class RouterSettings(CommonSettings):
    """How the router listens, how much it admits, and how long it waits for runners."""

    model_config = SettingsConfigDict(env_prefix="PLNT_ROUTER_", extra="ignore")

    host: str = Field(
        default="127.0.0.1",
        description="Interface to listen on; 0.0.0.0 in a container.",
    )
    port: int = Field(
        default=8080,
        ge=0,
        le=65535,
        description="TCP port to listen on; 0 picks a free one (printed at start-up).",
    )
    max_body_bytes: int = Field(
        default=MIB,
        ge=1,
        description="Largest request body accepted; bigger bodies get 413.",
    )
    max_json_depth: int = Field(
        default=64,
        ge=1,
        description="Deepest nesting of arrays and objects in a JSON body; deeper gets 422.",
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description=(
            "Longest time from a request's first byte to the end of its headers; beyond it "
            "the router answers 408 and closes the connection."
        ),
    )
    body_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description=(
            "Longest time to receive a whole request body once its headers are in; beyond "
            "it the router answers 408 and closes the connection."
        ),
    )
    keepalive_timeout_s: float = Field(
        default=75.0,
        gt=0,
        description="How long a client connection may stay idle before (or between) requests.",
    )
    max_in_flight: int = Field(
        default=256,
        ge=1,
        description="Calls forwarded to runners at the same time (also the connection pool size).",
    )
    max_queue: int = Field(
        default=1024,
        ge=0,
        description="Calls waiting for an in-flight slot; beyond this the router answers 429.",
    )
    retry_after_s: int = Field(
        default=1,
        ge=1,
        description="Seconds sent in Retry-After with 429 and 503 answers.",
    )
    upstream_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description=(
            "Longest wait for a runner's whole JSON answer, or between two chunks of an "
            "SSE stream; beyond it the router answers 504."
        ),
    )
    connect_timeout_s: float = Field(
        default=2.0,
        gt=0,
        description=(
            "Longest wait for a new connection to a backend endpoint of a spread revision "
            "(one listing endpoints); beyond it the endpoint counts a failure and the call "
            "goes to another. A target with only a url waits upstream_timeout_s, as before."
        ),
    )
    endpoint_down_after: int = Field(
        default=1,
        ge=1,
        description=(
            "Failures in a row (connection refused or timed out, connection broken before "
            "the answer, 502/503/504) that take a backend endpoint out of its revision's split."
        ),
    )
    endpoint_probe_interval_s: float = Field(
        default=1.0,
        gt=0,
        description=(
            "How often every endpoint is asked its runner's GET /healthz: two failed in a row "
            "take an endpoint out (a hung runner), a 200 brings a taken-out one back."
        ),
    )
    endpoint_probe_timeout_s: float = Field(
        default=1.0,
        gt=0,
        description="Longest wait for one health probe's answer; no answer counts as down.",
    )
    endpoint_ramp_s: float = Field(
        default=10.0,
        ge=0,
        description=(
            "Seconds over which an endpoint that came back goes from a twentieth of its share "
            "of calls to all of it (0: all at once)."
        ),
    )
    retry_unanswered: bool = Field(
        default=True,
        description=(
            "Re-send once, to another endpoint, a call to a spread revision whose runner broke "
            "the connection before answering (it usually died with the call). Calls never "
            "sent, and 503s (the runner did not run the call), are re-sent regardless. "
            "false: such a call is answered 502, for workflows whose side effects must never "
            "run twice."
        ),
    )
    shutdown_grace_s: float = Field(
        default=30.0,
        ge=0,
        description="On SIGTERM/SIGINT, how long in-flight calls may take to finish.",
    )
    figures_interval_s: float = Field(
        default=1.0,
        gt=0,
        description="How often the router publishes its cumulative call totals per workflow "
        "and revision on the bus, for the promoter's live analysis.",
    )
    shadow_workers: int = Field(
        default=4,
        ge=1,
        description="Mirrored (shadow) calls sent at the same time, each on its own "
        "connection apart from the live calls' pool.",
    )
    shadow_queue: int = Field(
        default=256,
        ge=1,
        description="Mirrored calls waiting for a shadow worker; a call that finds the queue "
        "full is not mirrored (counted in plnt_router_shadow_dropped_total).",
    )
    shadow_publish_timeout_s: float = Field(
        default=2.0,
        gt=0,
        description="Longest wait for the bus to take a shadow pair; a pair not taken is "
        "dropped and counted, never retried.",
    )
    auth: Literal["keys", "none"] = Field(
        default="keys",
        description="keys: a call to a namespace without a key in api_keys, or without its "
        "valid key, is 401 (the router refuses to start with no keys); none: namespaces "
        "not in api_keys are open (`plnt up` on loopback).",
    )
    api_keys: dict[str, SecretStr] | None = Field(
        default=None,
        description=(
            'Optional namespace -> API key map, as JSON (e.g. \'{"default": "s3cret"}\'). '
            "Calls to a listed namespace need 'Authorization: Bearer <key>', else 401; "
            "namespaces not listed are refused with auth keys, open with auth none."
        ),
    )
