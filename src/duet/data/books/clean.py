"""Shared cleaner for book text: paragraphs in, speakable sentences out.

Three steps, each a small pure function:
1. `normalise`: one space between words; curly quotes made straight; double quotes dropped; a single quote kept
   only as an apostrophe (between two letters: "don't", "Darcy's"), otherwise dropped; dashes ("--" and the
   Unicode dashes) read as a pause, so they become ", "; `_italics_` underscores and list labels ("2. The ...",
   "(c) To ...") dropped; a paragraph's all-caps first word before lower-case text is a drop capital
   ("EN el principio" -> "En el").
2. `split_sentences`: split after . ! or ? unless the next word starts in lower case or with a digit, and never
   after a title such as "Mr." or "St." or an initial ("A. R. Fausset"), which would otherwise end a sentence
   early.
3. `is_speakable`: 4-30 words, a capital first, . ! or ? last, only letters, digits and light punctuation in
   between (no brackets, quotes, slashes or symbols), no verse numbers ("23:1"), no ellipsis, no all-caps word
   longer than three letters, no lower-case word of three or more letters without a vowel (a transliteration
   such as "tld"), no bare citation ("Thomas Adams, 1614."), no word from the fortune blocklist, and ASCII only
   for English.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import pairwise

from duet.data.manifest import split_key

# A small safety net on top of the category choice: a sentence with any of these words is dropped.
BLOCKLIST = frozenset(
    "sex sexy sexual penis vagina nigger negro fag faggot whore slut rape raped bitch bastard fuck fucking shit "
    "damn hell kill killed killing suicide drunk nazi hitler jew jews jewish judio judío moro moros puta puto "
    "maricón maricon mierda coño cojones caralho porra merda buceta viado bunda vibrator orgasm nude naked "
    "erotic porn".split()
)

MIN_WORDS = 4
MAX_WORDS = 30

_LETTERS = {"en": "A-Za-z", "es": "A-Za-zÁÉÍÓÚÜÑáéíóúüñ"}
_OPENING = {"en": "", "es": "¿¡"}

# Words after which a full stop does not end the sentence (compared case-sensitively, without the stop).
_ABBREVIATIONS = frozenset(
    "Mr Mrs Ms Messrs Dr St Mt Jr Sr Sra Srta Mme Mlle Capt Col Gen Lt Sgt Rev Prof Hon Esq Gov Ud Uds Vd Vds "
    "vs cf viz Co Ltd".split()
)

_QUOTES = tuple((quote, '"') for quote in "“”„«»") + tuple((quote, "'") for quote in "‘’`´")
_DASHES = ("--", "—", "–", "―")
_SPACE_BEFORE_MARK = re.compile(r" ([.,;:!?])")
_COMMA_RUN = re.compile(r",(?: ?,)+")
_COMMA_BEFORE_MARK = re.compile(r",(?=[.!?;:])")
_MARK_THEN_COMMA = re.compile(r"([.!?;:]) ?,")
_DROP_CAP = re.compile(r"^([¿¡]?[A-ZÁÉÍÓÚÜÑ])([A-ZÁÉÍÓÚÜÑ]+)(?= [a-záéíóúüñ])")  # "EN el" -> "En el"
_LIST_NUMBER = r"(?:\(?\d{1,3}[.)]|\([a-z]\))"  # "2." "(3)" "(c)"
_LEADING_ENUMERATOR = re.compile(rf"^{_LIST_NUMBER} ")
_ENUMERATOR = re.compile(rf"([.!?:;]) {_LIST_NUMBER}(?= |$)")
_BOUNDARY = re.compile(r"[.!?][)\]]*\s+(?![a-záéíóúüñ0-9])")
_VERSE_NUMBER = re.compile(r"\d\s*[:.]\s*\d")
_SHOUT = re.compile(r"(?<!\w)[A-ZÁÉÍÓÚÜÑ]{4,}(?!\w)")
_NO_VOWEL = re.compile(r"\b[b-df-hj-np-tv-xz]{3,}\b")  # "tld": a transliteration, not a word
_CITATION = re.compile(r"^(?:[A-Z][\w'.-]*,? )+\d{4}(?:-\d{2,4})?\.$")  # "Thomas Adams, 1614."


def _apostrophes_only(text: str) -> str:
    """Drop every ' that is not between two letters."""
    parts = text.split("'")
    out = [parts[0]]
    for left, right in pairwise(parts):
        out.append("'" if left[-1:].isalpha() and right[:1].isalpha() else "")
        out.append(right)
    return "".join(out)


def normalise(text: str) -> str:
    """Whitespace, quotes and dashes of one paragraph, as described in the module docstring."""
    for old, new in _QUOTES:
        text = text.replace(old, new)
    text = _apostrophes_only(text.replace('"', " ").replace("_", ""))
    for dash in _DASHES:
        text = text.replace(dash, " , ")
    text = " ".join(text.split())
    text = _DROP_CAP.sub(lambda m: m[1] + m[2].lower(), text)
    text = _ENUMERATOR.sub(r"\1", _LEADING_ENUMERATOR.sub("", text))
    text = _SPACE_BEFORE_MARK.sub(r"\1", text)
    text = _COMMA_RUN.sub(",", text)
    text = _COMMA_BEFORE_MARK.sub("", text)
    text = _MARK_THEN_COMMA.sub(r"\1", text)
    return text.strip(" ,;:")


def _ends_with_abbreviation(piece: str) -> bool:
    if not piece.endswith("."):
        return False
    last = piece.rsplit(" ", 1)[-1][:-1].lstrip("¿¡([")
    return last in _ABBREVIATIONS or (len(last) == 1 and last.isupper())


def split_sentences(paragraph: str) -> list[str]:
    """Sentences of one normalised paragraph; a boundary after an abbreviation or an initial is not one."""
    sentences: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(paragraph):
        end = match.start() + 1
        if _ends_with_abbreviation(paragraph[start:end]):
            continue
        sentences.append(paragraph[start : match.end()].strip())
        start = match.end()
    sentences.append(paragraph[start:].strip())
    return [s for s in sentences if s]


def _shape(language: str) -> re.Pattern[str]:
    letters, opening = _LETTERS[language], _OPENING[language]
    return re.compile(rf"^[{opening}]?[{letters}][{letters}0-9 ,;:'\-.!?{opening}]*[{letters}0-9][.!?]$")


_SHAPES = {language: _shape(language) for language in _LETTERS}


def _well_formed(sentence: str, language: str, min_words: int, max_words: int) -> bool:
    """Every check of `is_speakable` but the blocklist, which needs the sentence's `split_key`."""
    if not min_words <= len(sentence.split()) <= max_words or not _SHAPES[language].match(sentence):
        return False
    if not sentence.lstrip("¿¡")[:1].isupper() or (language == "en" and not sentence.isascii()):
        return False
    if ".." in sentence or " -" in sentence or "- " in sentence or _VERSE_NUMBER.search(sentence):
        return False
    return not (_CITATION.match(sentence) or _NO_VOWEL.search(sentence) or _SHOUT.search(sentence))


def _blocked(key: str) -> bool:
    return not BLOCKLIST.isdisjoint(key.split())


def is_speakable(sentence: str, language: str, min_words: int = MIN_WORDS, max_words: int = MAX_WORDS) -> bool:
    """Whether one normalised sentence may be read aloud as it is (see the module docstring)."""
    return _well_formed(sentence, language, min_words, max_words) and not _blocked(split_key(sentence))


def clean_paragraphs(
    paragraphs: Iterable[str], language: str, min_words: int = MIN_WORDS, max_words: int = MAX_WORDS
) -> tuple[str, ...]:
    """Speakable sentences of all paragraphs, sorted, one per `split_key` (the first in sorted order wins)."""
    candidates = {
        sentence
        for paragraph in paragraphs
        for sentence in split_sentences(normalise(paragraph))
        if _well_formed(sentence, language, min_words, max_words)
    }
    by_key: dict[str, str] = {}
    for sentence in sorted(candidates):
        key = split_key(sentence)
        if key not in by_key and not _blocked(key):
            by_key[key] = sentence
    return tuple(sorted(by_key.values()))
