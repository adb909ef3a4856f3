"""Golden cases of a smoke test (``spec.smokeTest.golden``) and their results in the status.

A golden case is one invoke body sent to the canary and the rules its reply text must
meet. These are the models only: the smoke service judges them (``plnt_smoke.golden``).
"""

import json
import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from plnt_common.errors import SpecInvalid
from plnt_common.names import check_dns_label

MAX_GOLDEN_CASES = 20
"""Each case is one more call to the canary (and an embedding with ``similarTo``)."""
MAX_GOLDEN_INPUT_BYTES = 16 * 1024
MAX_RULE_TEXTS = 20
DEFAULT_MIN_SIMILARITY = 0.7
"""The threshold of ``similarTo`` when ``minSimilarity`` is not given."""

RuleText = Annotated[str, Field(min_length=1, max_length=500)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class GoldenExpect(_Model):
    """Rules on the reply text; every rule given must hold."""

    contains: tuple[RuleText, ...] = Field(
        default=(), max_length=MAX_RULE_TEXTS, description="Substrings the text must contain."
    )
    not_contains: tuple[RuleText, ...] = Field(
        default=(), max_length=MAX_RULE_TEXTS, alias="notContains"
    )
    matches: str | None = Field(
        default=None,
        min_length=1,
        max_length=500,
        description="A Python regular expression found anywhere in the text (re.search).",
    )
    similar_to: str | None = Field(
        default=None,
        min_length=1,
        max_length=2000,
        alias="similarTo",
        description="A reference reply the text must resemble in meaning.",
    )
    min_similarity: float | None = Field(
        default=None,
        ge=0,
        le=1,
        alias="minSimilarity",
        description="Least cosine similarity of the sentence embeddings; 0.7 when not given.",
    )

    @field_validator("matches")
    @classmethod
    def _matches_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return value

    @field_validator("min_similarity")
    @classmethod
    def _threshold_needs_a_reference(
        cls, value: float | None, info: ValidationInfo
    ) -> float | None:
        if value is not None and info.data.get("similar_to") is None:
            raise ValueError("needs similarTo (it is the threshold of similarTo)")
        return value

    @model_validator(mode="after")
    def _has_a_rule(self) -> "GoldenExpect":
        if not (self.contains or self.not_contains or self.matches or self.similar_to):
            raise ValueError("give at least one rule: contains, notContains, matches or similarTo")
        return self

    @property
    def similarity_threshold(self) -> float:
        return DEFAULT_MIN_SIMILARITY if self.min_similarity is None else self.min_similarity


class GoldenCase(_Model):
    name: str = Field(description="Names the case in the status; a DNS-1123 label.")
    input: dict[str, Any] = Field(description="The invoke body sent to the canary.")
    expect: GoldenExpect

    @field_validator("name")
    @classmethod
    def _name_is_label(cls, value: str) -> str:
        try:
            return check_dns_label(value, what="case name")
        except SpecInvalid as exc:
            raise ValueError(str(exc)) from None

    @field_validator("input")
    @classmethod
    def _input_is_bounded(cls, value: dict[str, Any]) -> dict[str, Any]:
        size = len(json.dumps(value, separators=(",", ":")).encode())
        if size > MAX_GOLDEN_INPUT_BYTES:
            raise ValueError(
                f"input is {size} bytes as JSON, over the {MAX_GOLDEN_INPUT_BYTES}-byte bound"
            )
        return value


def check_unique_names(cases: tuple[GoldenCase, ...]) -> tuple[GoldenCase, ...]:
    """``cases`` if no two share a name; raises ``ValueError`` naming the first repeat."""
    first_index: dict[str, int] = {}
    for index, case in enumerate(cases):
        if case.name in first_index:
            raise ValueError(
                f"case name {case.name!r} is used by cases [{first_index[case.name]}] and "
                f"[{index}]: names must be unique"
            )
        first_index[case.name] = index
    return cases


class GoldenResult(_Model):
    """How one golden case fared in the last smoke test."""

    name: str
    passed: bool
    reason: str = Field(default="", description="What held, or every rule that did not.")
    similarity: float | None = Field(default=None, description="With similarTo: the score.")
