"""Sentences from books packaged in Debian, for voices to read: the English and Spanish sources beside the fortunes.

| source | language | package | what | licence |
| --- | --- | --- | --- | --- |
| tdavid | en | sword-comm-tdavid | Spurgeon's Treasury of David, psalm by psalm exposition | public domain |
| web | en | sword-text-web | World English Bible with Deuterocanon | public domain |
| wordnet | en | wordnet-base | WordNet 3.0 usage examples | WordNet 3.0 licence |
| austen | en | r-cran-janeaustenr | Jane Austen's six novels | MIT (package), novels public domain |
| sparv | es | sword-text-sparv | Reina-Valera Bible, 1909 | public domain |

Each module's docstring gives the file format and the licence in full. Every source goes through the shared
cleaner (`clean.py`), so each yields sorted, de-duplicated, speakable sentences of 4-30 words.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import cache, partial

from duet.data.books import austen, sword, wordnet
from duet.data.books.clean import clean_paragraphs
from duet.data.manifest import split_key

# Per language, per source: a function returning the source's paragraphs (raises MissingDependency).
SOURCES: dict[str, dict[str, Callable[[], Iterable[str]]]] = {
    "en": {
        "tdavid": partial(sword.module_paragraphs, "TDavid", "sword-comm-tdavid"),
        "web": partial(sword.module_paragraphs, "engWEB2015eb", "sword-text-web"),
        "wordnet": wordnet.examples,
        "austen": austen.novel_paragraphs,
    },
    "es": {"sparv": partial(sword.module_paragraphs, "spaRV1909eb", "sword-text-sparv")},
}


@cache
def source_sentences(language: str, source: str) -> tuple[str, ...]:
    """The cleaned sentences of one source."""
    if source not in SOURCES.get(language, {}):
        raise ValueError(f"no book source {source!r} for language {language!r}")
    return clean_paragraphs(SOURCES[language][source](), language)


@cache
def book_sentences(language: str) -> dict[str, tuple[str, ...]]:
    """Source name -> its cleaned, sorted, de-duplicated sentences, for every book source of `language`.

    Raises MissingDependency, naming the Debian package, when a source's files are not installed.
    """
    if language not in SOURCES:
        raise ValueError(f"no book sources for language {language!r}")
    return {source: source_sentences(language, source) for source in SOURCES[language]}


def dedupe_across(sources: dict[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """Each source without the sentences an earlier source (in dict order) or itself already has.

    Sentences are compared by `duet.data.manifest.split_key`, the identity the train/val/test split uses, so one
    text never lands in two sources (and so never in two splits).
    """
    seen: set[str] = set()
    out: dict[str, tuple[str, ...]] = {}
    for name, sentences in sources.items():
        kept: list[str] = []
        for sentence in sentences:
            key = split_key(sentence)
            if key not in seen:
                seen.add(key)
                kept.append(sentence)
        out[name] = tuple(kept)
    return out
