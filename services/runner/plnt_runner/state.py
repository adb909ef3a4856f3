"""What one runner process holds while it serves: settings, the workflow, its executor.

Created by ``app.create_app``; the executor and provider are filled in at startup (they
need the HTTP client session, which needs the running loop) and read by the handlers.
"""

from dataclasses import dataclass

from plnt_common import tracing
from plnt_common.metrics import INVOCATION_DURATION, INVOCATIONS, LLM_COST, LLM_TOKENS
from plnt_common.workflow import Workflow
from plnt_runner.adapters.nvml import GpuProbe
from plnt_runner.admission import Admission
from plnt_runner.cache import StepCache
from plnt_runner.executor import Executor
from plnt_runner.settings import RunnerSettings
from plnt_runner.usage import TokenUsage


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
            exemplar = tracing.exemplar() if tracing.ENABLED else None
            INVOCATION_DURATION.labels(*labels).observe(seconds, exemplar)

    def record_spend(self, usage: TokenUsage) -> float:
        """Count one invocation's tokens and cost (``plnt_llm_*``); returns the cost in USD."""
        settings = self.settings
        cost = (
            usage.prompt_tokens * settings.llm_input_price_per_mtok_usd
            + usage.completion_tokens * settings.llm_output_price_per_mtok_usd
        ) / 1_000_000
        name, revision = self.name, settings.revision
        LLM_TOKENS.labels(name, revision, "prompt").inc(usage.prompt_tokens)
        LLM_TOKENS.labels(name, revision, "completion").inc(usage.completion_tokens)
        LLM_COST.labels(name, revision).inc(cost)
        return cost
