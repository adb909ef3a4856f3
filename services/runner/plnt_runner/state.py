"""What one runner process holds while it serves: settings, the workflow, its executor.

Created by ``app.create_app``; the executor and provider are filled in at startup (they
need the HTTP client session, which needs the running loop) and read by the handlers.
"""

from dataclasses import dataclass

from plnt_common.metrics import INVOCATION_DURATION, INVOCATIONS
from plnt_common.workflow import Workflow
from plnt_runner.adapters.nvml import GpuProbe
from plnt_runner.admission import Admission
from plnt_runner.cache import StepCache
from plnt_runner.executor import Executor
from plnt_runner.settings import RunnerSettings


@dataclass
class RunnerState:
    settings: RunnerSettings
    workflow: Workflow
    digest: str
    admission: Admission
    cache: StepCache | None
    executor: Executor | None = None
    """None until startup has built it: ``/healthz`` answers 503 and ``/invoke`` too."""
    provider: str = ""
    gpu: GpuProbe | None = None

    @property
    def name(self) -> str:
        return self.workflow.metadata.name

    def record(self, *, status: str, seconds: float | None) -> None:
        """Count one invocation by status; observe its duration when it ran (``seconds``)."""
        labels = (self.name, self.settings.revision, status)
        INVOCATIONS.labels(*labels).inc()
        if seconds is not None:
            INVOCATION_DURATION.labels(*labels).observe(seconds)
