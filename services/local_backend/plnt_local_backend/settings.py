"""Settings of the local-backend process: ``PLNT_LOCAL_BACKEND_*`` on top of the shared ``PLNT_*``.

Read once by ``app.main``; nothing else in the service reads the environment, except the
adapter that builds a runner's environment (``adapters/runner_env.py``), which must read
the LLM API key variable a release names. This module declares settings; it opens nothing.
"""

import sys
from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from plnt_common.settings import CommonSettings


def _default_data_dir() -> Path:
    return Path.home() / ".plnt" / "local-backend"


def _default_runner_command() -> list[str]:
    # The same interpreter as the local-backend, so a pip-installed plnt finds plnt_runner.
    return [sys.executable, "-m", "plnt_runner"]


class LocalBackendSettings(CommonSettings):
    """Where releases live on disk, how runners start, and how hard they are restarted."""

    model_config = SettingsConfigDict(env_prefix="PLNT_LOCAL_BACKEND_", extra="ignore")

    data_dir: Path = Field(
        default_factory=_default_data_dir,
        description=(
            "Each release gets releases/<namespace>/<release>/ here with workflow.yaml, "
            "runner.log, runner.pid and launch.json; a workflow's code gets its environment "
            "in envs/<digest>-<hash>/, kept for later releases of the same code. `plnt up` "
            "points it into its state dir."
        ),
    )
    backend: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
        description=(
            "The `local` PlntBackend this process serves (`plnt serve local-backend --backend "
            "NAME`): it runs only the desired releases installed onto NAME, keeps its state in "
            "<data_dir>/NAME/, and its start-up cleanup touches only its own releases. `plnt "
            "up` starts one per `local` PlntBackend. Unset: the single-process mode (compose, "
            "a hand-run stack) that runs every desired release in <data_dir>; never run it "
            "beside processes with a backend on the same bus, or both would run a release."
        ),
        examples=["gpu-east"],
    )
    runner_command: list[str] = Field(
        default_factory=_default_runner_command,
        min_length=1,
        description=(
            "Command that starts one runner of a workflow without runtime.code, as a JSON "
            "list; it is configured through PLNT_RUNNER_* variables (workflow file, host, "
            "port, revision, LLM). A workflow with code runs its runtime.entrypoint instead."
        ),
        examples=[["/usr/bin/python3", "-m", "plnt_runner"]],
    )
    owner_pid: int | None = Field(
        default=None,
        gt=0,
        description=(
            "Pid of the process that owns this embedded stack (`plnt up`). Runners get it as "
            "PLNT_RUNNER_EXIT_WITH_PID and exit when it is gone; the local-backend itself stops "
            "every runner and exits when it is gone, so a `plnt up` killed with -9 leaves no "
            "orphans. Unset: runners outlive everything until stopped."
        ),
    )
    ready_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="How long a started runner may take to answer GET /healthz with 200 "
        "before it is killed and counted as a failed start.",
    )
    restart_backoff_initial_s: float = Field(
        default=1.0,
        gt=0,
        description="Delay before the first restart of a runner that exited; doubles per "
        "failure in a row.",
    )
    restart_backoff_max_s: float = Field(
        default=60.0,
        gt=0,
        description="Longest delay between two restarts.",
    )
    max_restarts: int = Field(
        default=5,
        ge=0,
        description="Failed starts in a row that are restarted; one more and the release is "
        "reported Failed until its desired record changes.",
    )
    restart_reset_after_s: float = Field(
        default=300.0,
        gt=0,
        description="A runner that served this long before exiting starts a new streak: its "
        "exit counts as the first failure in a row (the restarts total keeps counting).",
    )
    stop_grace_s: float = Field(
        default=10.0,
        ge=0,
        description="Between SIGTERM and SIGKILL when a runner is stopped.",
    )
    pip_timeout_s: float = Field(
        default=900.0,
        gt=0,
        description="How long pip may take to install a workflow's requirements into its "
        "code environment (<data_dir>/envs/) before the release fails DependenciesFailed.",
    )
    probe_interval_s: float = Field(
        default=0.2,
        gt=0,
        description="How often a starting runner's /healthz and a running runner's process "
        "are checked.",
    )

    @property
    def state_dir(self) -> Path:
        """Where this process keeps releases and code environments: its backend's own dir."""
        return self.data_dir / self.backend if self.backend else self.data_dir
