"""Rule-based reading and writing of short customer messages, used by the offline provider.

A lexicon (data the caller loads: ``Lexicon``) finds each clause's sentiment and subject;
templates turn that into a reply in the requested brand voice; a few patterns moderate a
draft. Deterministic and pure: the same text always gives the same result. It is a
stand-in for a model when none is configured, not a replacement for one.
"""

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


class LexiconInvalid(ValueError):
    """A lexicon mapping lacks a field or has one of the wrong shape."""


@dataclass(frozen=True)
class Lexicon:
    """The words that give messages of one domain their sentiment and subjects.

    ``subjects`` maps each keyword to the subject it belongs to; the keyword itself is
    what a reply names. The words are data (the offline provider ships an example set),
    so these rules know no domain of their own.
    """

    positive: frozenset[str]
    negative: frozenset[str]
    negations: frozenset[str]
    subjects: Mapping[str, str]
    insults: frozenset[str]

    @classmethod
    def from_mapping(cls, data: object) -> "Lexicon":
        """A lexicon from parsed YAML/JSON: space-separated words per field, ``subjects``
        as subject -> keywords, ``insults`` as a list of phrases; ``LexiconInvalid`` names
        the first field that is missing or malformed."""
        if not isinstance(data, Mapping):
            raise LexiconInvalid("a lexicon is a mapping of positive, negative, ... to words")
        subjects = data.get("subjects")
        insults = data.get("insults")
        if not isinstance(subjects, Mapping) or not all(
            isinstance(v, str) for v in subjects.values()
        ):
            raise LexiconInvalid("lexicon field subjects: give subject: space-separated keywords")
        if not isinstance(insults, list) or not all(isinstance(v, str) for v in insults):
            raise LexiconInvalid("lexicon field insults: give a list of phrases")
        return cls(
            positive=_words(_field(data, "positive")),
            negative=_words(_field(data, "negative")),
            negations=_words(_field(data, "negations")),
            subjects={k: str(s) for s, kws in subjects.items() for k in _words(kws)},
            insults=frozenset(insults),
        )


def _field(data: Mapping[str, object], name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str):
        raise LexiconInvalid(f"lexicon field {name}: give space-separated words")
    return value


_CLAUSE_SPLIT = re.compile(r"\b(?:but|however|although|though|except|and|while)\b|[.;!?,]")
_TOKEN = re.compile(r"[a-z']+")

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")
_PHONE = re.compile(r"\+?\d[\d\s().-]{7,}\d")
_LIABILITY = re.compile(r"\b(refund\w*|compensat\w*|free of charge|lawsuit|liable|liability)\b")
MAX_DRAFT_CHARS = 1500


@dataclass(frozen=True)
class Remark:
    """One thing the customer praised or criticised: ``keyword`` as written, its subject, and
    the sentiment word used about it ("" when it was negated, as in "not friendly")."""

    keyword: str
    subject: str
    word: str


@dataclass(frozen=True)
class Reading:
    """What a message says: overall sentiment, main topic, praise and concerns."""

    sentiment: str
    topic: str
    praise: tuple[Remark, ...] = field(default=())
    concerns: tuple[Remark, ...] = field(default=())


def read_message(text: str, *, lexicon: Lexicon) -> Reading:
    """Sentiment (positive, negative, mixed or neutral) and subjects of ``text``."""
    praise: list[Remark] = []
    concerns: list[Remark] = []
    for clause in _CLAUSE_SPLIT.split(text.lower()):
        for remark, score in _clause_remarks(_TOKEN.findall(clause), lexicon):
            if score > 0:
                praise.append(remark)
            elif score < 0:
                concerns.append(remark)
    if praise and concerns:
        sentiment = "mixed"
    elif praise:
        sentiment = "positive"
    elif concerns:
        sentiment = "negative"
    else:
        sentiment = "neutral"
    mentioned = [lexicon.subjects[t] for t in _TOKEN.findall(text.lower()) if t in lexicon.subjects]
    subjects = [r.subject for r in (*concerns, *praise) if r.subject] + mentioned
    return Reading(
        sentiment, subjects[0] if subjects else "general", tuple(praise), tuple(concerns)
    )


def _clause_remarks(tokens: list[str], lexicon: Lexicon) -> list[tuple[Remark, int]]:
    """Each subject keyword of one clause with the score of the sentiment words nearest to it
    (a negation flips the next word); a clause without a keyword gives one subject-less
    remark."""
    keywords = [(i, t) for i, t in enumerate(tokens) if t in lexicon.subjects]
    scores: dict[int, int] = {}
    words: dict[int, dict[int, str]] = {}
    negated = False
    for i, token in enumerate(tokens):
        if token in lexicon.negations or token.endswith("n't"):
            negated = True
            continue
        polarity = 1 if token in lexicon.positive else -1 if token in lexicon.negative else 0
        if not polarity:
            continue
        # The nearest keyword owns the word; on a tie the earlier one ("food was good").
        owner = min(keywords, key=lambda k: abs(k[0] - i))[0] if keywords else -1
        scores[owner] = scores.get(owner, 0) + (-polarity if negated else polarity)
        if not negated:
            words.setdefault(owner, {}).setdefault(polarity, token)
        negated = False
    remarks = []
    for owner, score in scores.items():
        keyword = tokens[owner] if owner >= 0 else ""
        word = words.get(owner, {}).get((score > 0) - (score < 0), "")
        remarks.append((Remark(keyword, lexicon.subjects.get(keyword, ""), word), score))
    return sorted(remarks, key=lambda r: tokens.index(r[0].keyword) if r[0].keyword else -1)


def subjects_of(remarks: Iterable[Remark]) -> list[str]:
    """Distinct subjects of ``remarks``, in order."""
    return list(dict.fromkeys(r.subject for r in remarks if r.subject))


def describe_voice(voice: str) -> str:
    """The brand voice as guidance, or a neutral default when the request names none."""
    return voice or "friendly, professional, first-person plural (the request named no voice)"


def voice_guidance(*, reading: Reading, voice: str, passages: Iterable[str]) -> str:
    """Two or three sentences on how a reply should sound and what it should address."""
    sentences = [f"Voice: {describe_voice(voice)}."]
    asks = []
    praised = _join([r.keyword for r in reading.praise if r.keyword])
    if praised:
        asks.append(f"thank the customer for the praise of the {praised}")
    concerns = _join([_remark_phrase(r) for r in reading.concerns if r.keyword])
    if concerns:
        asks.append(f"acknowledge the {concerns} without excuses")
    if asks:
        sentences.append(_capitalize(" and ".join(asks)) + ".")
    known = list(passages)
    if known:
        sentences.append("Knowledge base: " + " ".join(known))
    return " ".join(sentences)


def compose_reply(*, reading: Reading, voice: str) -> str:
    """A short public reply to a message read as ``reading``, in ``voice``."""
    style = voice.lower()
    warm = any(w in style for w in ("warm", "friendly", "enthusiastic"))
    concise = any(w in style for w in ("concise", "short", "brief"))
    praised = _join([r.keyword for r in reading.praise if r.keyword])
    concerns = _join([_remark_phrase(r) for r in reading.concerns if r.keyword])
    thanks = "Thank you so much" if warm else "Thank you"
    if reading.sentiment in ("positive", "mixed"):
        opener = (
            f"{thanks} for your kind words about our {praised}!"
            if praised
            else (f"{thanks} for your kind review!")
        )
    elif reading.sentiment == "negative":
        opener = f"{thanks} for taking the time to share your experience."
    else:
        opener = f"{thanks} for your review."
    sentences = [opener]
    if concerns:
        sentences.append(f"We're sorry to hear about the {concerns}.")
        if not concise:
            sentences.append("We're looking into how to make it better.")
    elif reading.concerns:
        sentences.append("We're sorry parts of your visit fell short.")
    if reading.sentiment == "negative":
        sentences.append("We'd love the chance to make it right next time.")
    else:
        sentences.append("We hope to welcome you back soon!")
    return _apply_voice(" ".join(sentences), style)


def moderate(*, draft: str, blocked_terms: Iterable[str], lexicon: Lexicon) -> list[str]:
    """Reasons ``draft`` must not be published; empty when it may be."""
    text = draft.lower()
    reasons = []
    if not text.strip():
        reasons.append("the draft is empty")
    if len(draft) > MAX_DRAFT_CHARS:
        reasons.append(f"the draft is longer than {MAX_DRAFT_CHARS} characters")
    insults = sorted(term for term in lexicon.insults if term in text)
    if insults:
        reasons.append(f"insulting language: {', '.join(insults)}")
    if _EMAIL.search(draft) or _PHONE.search(draft):
        reasons.append("contains personal data (an email address or phone number)")
    if _LIABILITY.search(text):
        reasons.append("promises money or admits liability")
    blocked = sorted({t for t in blocked_terms if t and t.lower() in text})
    if blocked:
        reasons.append(f"contains blocked terms: {', '.join(blocked)}")
    return reasons


def _remark_phrase(remark: Remark) -> str:
    return f"{remark.word} {remark.keyword}" if remark.word else remark.keyword


def _join(items: list[str]) -> str:
    items = list(dict.fromkeys(items))
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _capitalize(text: str) -> str:
    return text[:1].upper() + text[1:]


_SINGULAR = {"We're": "I'm", "We'd": "I'd", "We ": "I ", " our ": " my ", " us ": " me "}
_FORMAL = {"We're": "We are", "We'd": "We would", "I'm": "I am", "I'd": "I would"}


def _apply_voice(reply: str, style: str) -> str:
    if "singular" in style:
        for plural, singular in _SINGULAR.items():
            reply = reply.replace(plural, singular)
    if "formal" in style and "informal" not in style:
        for short, full in _FORMAL.items():
            reply = reply.replace(short, full)
        reply = reply.replace("!", ".")
    return reply
