"""Live figures of a workflow's revisions: what step analysis and the guard judge.

The router counts every call it serves (revision, status, latency) and the runner every
call's tokens and cost; a ``FiguresSource`` reads those counts back as cumulative totals
per revision, the way Prometheus counters are read. A window is the difference of two
readings, so the hot path only ever increments counters and nothing is stored per call.

This module holds the shapes and the port; it imports no I/O library. The adapters (the
bus-published router totals, PromQL on Kubernetes) live with the service that reads them.
"""

from collections.abc import Mapping
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field


class RevisionTotals(BaseModel):
    """Cumulative counts of one revision since its counters started (they only grow)."""

    model_config = ConfigDict(frozen=True)

    invocations: int = Field(default=0, ge=0, description="Calls answered, any status.")
    errors: int = Field(default=0, ge=0, description="Calls answered with a 5xx status.")
    latency_buckets: tuple[tuple[float, int], ...] = Field(
        default=(),
        description="(upper bound in seconds, cumulative count), ascending, as a "
        "Prometheus histogram's buckets; the last bound may be +Inf.",
    )
    tokens: int = Field(default=0, ge=0, description="LLM tokens, prompt plus completion.")
    cost_usd: float = Field(default=0.0, ge=0, description="LLM cost at the backend's prices.")


class FiguresSource(Protocol):
    """Reads the live totals of one workflow's revisions."""

    async def totals(self, *, namespace: str, name: str) -> Mapping[str, RevisionTotals]:
        """Totals by revision label; a revision that served nothing yet is absent.

        Raises ``plnt_common.errors.PlntError`` subclasses for an unreachable source.
        """
        ...
