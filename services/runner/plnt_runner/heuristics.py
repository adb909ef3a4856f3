"""Rule-based reading and writing of short messages, used by the offline provider.

A lexicon (data the caller loads: ``Lexicon``) finds each clause's sentiment and subject,
and holds the phrases an acknowledgement of the message is written with; a few patterns
moderate a text. Deterministic and pure: the same text always gives the same result. It
is a stand-in for a model when none is configured, not a replacement for one.
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
    what an acknowledgement names. The words are data (the offline provider ships an example set),
    so these rules know no domain of their own.
    """

    positive: frozenset[str]
    negative: frozenset[str]
    negations: frozenset[str]
    subjects: Mapping[str, str]
    insults: frozenset[str]
    phrases: Mapping[str, str] = field(default_factory=dict)
    """The sentences ``acknowledge`` writes with (keys in ``PHRASE_KEYS``); optional, but
    ``acknowledge`` needs them."""
    compose_when: frozenset[str] = frozenset()
    """Words of a request that ask for an acknowledgement rather than a plain answer."""

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
        phrases = data.get("phrases", {})
        if not isinstance(phrases, Mapping) or (
            phrases and not all(isinstance(phrases.get(key), str) for key in PHRASE_KEYS)
        ):
            raise LexiconInvalid(f"lexicon field phrases: give text for {', '.join(PHRASE_KEYS)}")
        return cls(
            positive=_words(_field(data, "positive")),
            negative=_words(_field(data, "negative")),
            negations=_words(_field(data, "negations")),
            subjects={k: str(s) for s, kws in subjects.items() for k in _words(kws)},
            insults=frozenset(insults),
            phrases={str(k): str(v) for k, v in phrases.items()},
            compose_when=_words(str(data.get("compose_when", ""))),
        )


PHRASE_KEYS = (
    "thanks",
    "thanks_warm",
    "opener_praise",
    "opener_positive",
    "opener_negative",
    "opener_neutral",
    "concerns",
    "concerns_follow_up",
    "concerns_unnamed",
    "close_negative",
    "close",
)
"""The phrases a lexicon gives ``acknowledge``; ``{thanks}``, ``{praised}`` and ``{concerns}``
are filled in."""


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
MAX_TEXT_CHARS = 1500


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


def acknowledge(*, reading: Reading, style: str, lexicon: Lexicon) -> str:
    """A short acknowledgement of a message read as ``reading``, written with the lexicon's
    phrases, in the style ``style`` names (warm, concise, formal, singular)."""
    style = style.lower()
    say = lexicon.phrases
    warm = any(w in style for w in ("warm", "friendly", "enthusiastic"))
    concise = any(w in style for w in ("concise", "short", "brief"))
    praised = _join([r.keyword for r in reading.praise if r.keyword])
    concerns = _join([_remark_phrase(r) for r in reading.concerns if r.keyword])
    fill = {
        "thanks": say["thanks_warm"] if warm else say["thanks"],
        "praised": praised,
        "concerns": concerns,
    }
    if reading.sentiment in ("positive", "mixed"):
        opener = say["opener_praise"] if praised else say["opener_positive"]
    elif reading.sentiment == "negative":
        opener = say["opener_negative"]
    else:
        opener = say["opener_neutral"]
    sentences = [opener]
    if concerns:
        sentences.append(say["concerns"])
        if not concise:
            sentences.append(say["concerns_follow_up"])
    elif reading.concerns:
        sentences.append(say["concerns_unnamed"])
    sentences.append(say["close_negative"] if reading.sentiment == "negative" else say["close"])
    return _apply_style(" ".join(s.format(**fill) for s in sentences), style)


def moderate(*, text: str, blocked_terms: Iterable[str], lexicon: Lexicon) -> list[str]:
    """Reasons ``text`` must not be used; empty when it may be."""
    original, text = text, text.lower()
    reasons = []
    if not text.strip():
        reasons.append("the text is empty")
    if len(original) > MAX_TEXT_CHARS:
        reasons.append(f"the text is longer than {MAX_TEXT_CHARS} characters")
    insults = sorted(term for term in lexicon.insults if term in text)
    if insults:
        reasons.append(f"insulting language: {', '.join(insults)}")
    if _EMAIL.search(original) or _PHONE.search(original):
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


def _apply_style(text: str, style: str) -> str:
    if "singular" in style:
        for plural, singular in _SINGULAR.items():
            text = text.replace(plural, singular)
    if "formal" in style and "informal" not in style:
        for short, full in _FORMAL.items():
            text = text.replace(short, full)
        text = text.replace("!", ".")
    return text
