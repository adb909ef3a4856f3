"""The port the golden cases' ``similarTo`` rule scores through.

Only the ``typing.Protocol`` and its error live here; the sentence-embedding adapter is
``plnt_smoke.adapters.embeddings``.
"""

from collections.abc import Sequence
from typing import Protocol

from plnt_common.errors import PlntError


class SimilarityUnavailable(PlntError):
    """No scorer here (the optional ``golden`` extra is not installed, or its model failed to
    load): another delivery would not fix it, so the cases that need a score fail."""

    reason = "SimilarityUnavailable"


class SimilarityScorer(Protocol):
    async def similarities(self, *, texts: Sequence[str], references: Sequence[str]) -> list[float]:
        """Semantic similarity of each text to the reference at the same position, in -1..1
        (1: same meaning). Raises ``SimilarityUnavailable`` when nothing can score."""
        ...
