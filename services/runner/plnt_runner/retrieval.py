"""Inline knowledge-base retrieval for ``rag.query``: rank a step's ``with.documents`` by
word overlap with the query.

Deliberately small: no embeddings, no vector store, no I/O. It serves tenant knowledge that
fits in the workflow spec; a real vector store would sit behind a port of its own.
"""

import re
from collections.abc import Sequence

_WORD = re.compile(r"[a-z0-9]+")
_STOP_WORDS = frozenset(
    str.split(
        "a an and are as at be but by for from has have i in is it its of on or our so that the "
        "their there this to was we were with you your"
    )
)


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP_WORDS}


def retrieve(*, query: str, documents: Sequence[str], top_k: int) -> list[str]:
    """Up to ``top_k`` documents sharing the most words with ``query``, best first; documents
    sharing none are left out, ties keep the spec's order."""
    wanted = _words(query)
    scored = [(len(wanted & _words(doc)), index, doc) for index, doc in enumerate(documents)]
    ranked = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))
    return [doc for _, _, doc in ranked[: max(top_k, 0)]]
