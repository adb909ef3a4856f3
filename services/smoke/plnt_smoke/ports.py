"""The port the golden cases' ``similarTo`` rule scores through.

The ``typing.Protocol``, its error and the sentence-embedding adapter live in
``plnt_common.embeddings`` (the promoter's shadow comparison scores through them too).
"""

from plnt_common.embeddings import SimilarityScorer, SimilarityUnavailable

__all__ = ["SimilarityScorer", "SimilarityUnavailable"]
