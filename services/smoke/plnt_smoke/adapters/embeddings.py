"""The golden cases' scorer: ``plnt_common.embeddings.SentenceEmbedder`` (shared with the
promoter's shadow comparison, so it lives in plnt_common)."""

from plnt_common.embeddings import SentenceEmbedder

__all__ = ["SentenceEmbedder"]
