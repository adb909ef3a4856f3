"""Settings of the runner process, read from ``PLNT_RUNNER_*`` environment variables.

This module only declares and documents the settings; it reads no files and opens nothing.
"""

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from plnt_common.settings import CommonSettings


class RunnerSettings(CommonSettings):
    """What one runner process serves and how hard it may be pushed."""

    model_config = SettingsConfigDict(env_prefix="PLNT_RUNNER_", extra="ignore")

    workflow_file: Path = Field(
        description="Path of the workflow.yaml (microagents.dev/v1 Workflow) this runner serves.",
        examples=["/specs/ticket-triage/1.0.0/workflow.yaml"],
    )
    host: str = Field(default="127.0.0.1", description="Address the HTTP server binds to.")
    port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="TCP port; 0 picks a free one, announced as `listening on http://host:port`.",
    )
    revision: str = Field(
        default="",
        description="Revision label echoed in the `x-plnt-revision` header and the response.",
        examples=["ticket-triage-1-0-0-a1b2c3"],
    )
    llm_base_url: str = Field(
        default="",
        description="OpenAI-compatible base URL such as http://host:port/v1; "
        "empty uses the offline provider (deterministic, no API key needed).",
    )
    llm_model: str = Field(default="gpt-4o-mini", description="Model name sent to the LLM API.")
    llm_api_key: str = Field(
        default="",
        description="Bearer token for the LLM API; empty sends no Authorization header.",
    )
    llm_structured_outputs: bool = Field(
        default=False,
        description="The LLM API takes OpenAI `response_format` of type `json_schema` (the "
        "backend's llm.structuredOutputs): steps that ask for JSON send their schema there; "
        "otherwise the schema goes into the system message. Answers are validated either way.",
    )
    llm_input_price_per_mtok_usd: float = Field(
        default=0.0,
        ge=0,
        description="US dollars per million prompt tokens (the backend's llm prices); "
        "with the output price it makes each call's cost.",
    )
    llm_output_price_per_mtok_usd: float = Field(
        default=0.0, ge=0, description="US dollars per million completion tokens."
    )
    max_in_flight: int = Field(
        default=64, ge=1, description="Invocations executed at the same time."
    )
    max_queue: int = Field(
        default=256,
        ge=0,
        description="Invocations waiting for an in-flight slot; beyond it the runner answers "
        "429 with Retry-After.",
    )
    step_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="Deadline of one step, LLM calls and http.request included.",
    )
    cache_size: int = Field(
        default=4096,
        ge=0,
        description="Entries of the LRU step cache for LLM-backed tools; 0 disables it.",
    )
    max_body_bytes: int = Field(
        default=1024 * 1024,
        ge=1,
        description="Largest accepted invoke body; a larger one is answered 413.",
    )
    shutdown_timeout_s: float = Field(
        default=8.0,
        ge=0,
        description="On SIGTERM, how long in-flight invocations may take to finish; the "
        "runner contract asks every runner to exit within 10 s of the signal.",
    )
    exit_with_pid: int | None = Field(
        default=None,
        description="Exit when this process is gone: the embedded mode passes the `plnt up` "
        "pid, so killing it leaves no orphan runner behind.",
    )
