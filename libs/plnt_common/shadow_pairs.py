"""Shadow traffic's shared records: what the router mirrors and what the judge reads.

The router copies a share of live calls to the canary (``x-plnt-shadow: 1``), and a share
again to the stable for the noise floor; each finished pair is one message on
``plnt.shadow.<namespace>.<name>`` in the ``PLNT_SHADOW`` stream. The promoter judges the
pairs of its saga; ``plnt shadow NAME`` reads the figures and examples it keeps in status.
"""

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SHADOW_HEADER = "x-plnt-shadow"
"""``1`` on a mirrored call and on every call the runner makes for it."""
EFFECTS_REQUEST_HEADER = "x-plnt-effects"
"""``1`` on a call: the runner answers ``x-plnt-effects`` listing its side-effect calls."""
EFFECTS_RESPONSE_HEADER = "x-plnt-effects"
"""Compact JSON list of :class:`EffectCall` (executed, or intended in a shadow call)."""


class PairKind(StrEnum):
    CANARY = "canary"
    """stable (the caller's answer) vs canary (mirrored)."""
    NOISE = "noise"
    """stable (the caller's answer) vs stable again: the noise floor."""


class EffectCall(BaseModel):
    """One side-effect tool call: compared by tool and input, never by its result."""

    model_config = ConfigDict(frozen=True)

    tool: str
    input_sha256: str = Field(description="sha256 of the input as canonical JSON, hex.")


class ShadowAnswer(BaseModel):
    """One side of a pair, as the router saw it."""

    model_config = ConfigDict(frozen=True)

    revision: str
    status: int = Field(description="HTTP status; 0 when the runner could not be reached.")
    body: Any = Field(default=None, description="The JSON answer (None when not JSON).")
    latency_ms: float
    cost_usd: float = 0.0
    effects: tuple[EffectCall, ...] = ()


class ShadowPair(BaseModel):
    """One live call and its mirror, joined by ``pair_id``."""

    model_config = ConfigDict(frozen=True)

    pair_id: str
    namespace: str
    name: str
    saga_id: str = Field(description="The saga whose canary was mirrored to.")
    kind: PairKind
    input: Any = Field(description="The caller's JSON body.")
    stable: ShadowAnswer
    candidate: ShadowAnswer = Field(description="The canary's answer, or the stable's again.")
    at: float = Field(description="Unix time the pair finished.")


class ShadowRoute(BaseModel):
    """What the promoter asks the router to mirror while a run is ``Shadowing``."""

    model_config = ConfigDict(frozen=True)

    saga_id: str
    percent: int = Field(ge=0, le=100, description="Share of live calls mirrored to the canary.")
    noise_percent: int = Field(
        default=0, ge=0, le=100, description="Share of live calls sent to the stable again."
    )
    budget_usd: float | None = Field(
        default=None, gt=0, description="Mirroring stops once mirrored calls spent this."
    )
