"""The console's settings: ``PLNT_CONSOLE_*`` variables on top of the shared ``PLNT_*`` ones."""

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from plnt_common.settings import CommonSettings


class ConsoleSettings(CommonSettings):
    """Where the console listens, the token it asks for off loopback, and where the
    promote/abort/rollback buttons find WorkflowRuns."""

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
    source: Literal["embedded", "kubernetes"] = Field(
        default="embedded",
        description=(
            "Where WorkflowRuns live, as PLNT_WATCHER_SOURCE says for the watcher: embedded "
            "(the plnt-resources store of `plnt up`) or kubernetes (the API server: the "
            "buttons get the run and merge-patch its annotation there)."
        ),
    )
    kubeconfig: str = Field(
        default="",
        description="Path of a kubeconfig file; empty = standard resolution: the KUBECONFIG "
        "variable or ~/.kube/config, else the in-cluster service account.",
    )
    kube_context: str = Field(
        default="", description="kubeconfig context to use; empty = its current-context."
    )
    kube_request_timeout_s: float = Field(
        default=30.0, gt=0, description="Timeout of one Kubernetes API request."
    )
