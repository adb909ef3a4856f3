"""What a runner was launched with: the fingerprint compared with desired records, and the
record written beside its pid file so a restarted local-backend can adopt it.

Plain data models; no files are read or written here (``adapters/release_dir.py`` does).
"""

from pydantic import BaseModel, ConfigDict, Field

from plnt_common.releases import LlmConfig


class LaunchFingerprint(BaseModel):
    """Everything in a desired record that changes how the runner process starts.

    ``role`` and ``saga_id`` are deliberately absent: promoting a canary to stable, or a new
    saga re-installing the same revision, must keep the process that already serves.
    """

    model_config = ConfigDict(frozen=True)

    spec_digest: str
    revision: str
    workflow_name: str
    replicas: int
    gpu_class: str | None
    gpu_count: int
    llm: LlmConfig


class LaunchRecord(BaseModel):
    """One started runner: its pid, where it listens, and what it was started with."""

    model_config = ConfigDict(frozen=True)

    pid: int = Field(gt=0)
    port: int = Field(gt=0, le=65535)
    url: str
    fingerprint: LaunchFingerprint
    started_at: float = Field(description="Unix time of the launch.")
