"""Text for the synthetic voices to read, all from Debian packages or generated here (no download).

Sources and licences (from each package's /usr/share/doc/<package>/copyright):
- English sentences: `fortunes` + `fortunes-min` (BSD licence, Ken Arnold et al.), only the non-offensive
  top-level files (never `off/`), minus a few categories that are mostly jokes about groups of people or are
  not prose (`_EN_EXCLUDED`), minus any sentence containing a word from `BLOCKLIST`.
- Spanish: `fortunes-es` (GPL-2+; the collected quotes are "presumed to be in the public domain").
- Brazilian Portuguese: `fortunes-br` (GPL-2+).
- Dutch and Kyrgyz: sentence templates written here (too little packaged text in those languages).
- Numbers, dates, money, times and abbreviations: English templates written here, so the corpus exercises text
  normalisation; the manifest keeps the written form ("$12.50", "Dr.", "3:45 pm") exactly as the voice read it.
- Short register (1-2 words): `wamerican` (/usr/share/dict/american-english, public domain), lower-case
  entries only (proper nouns dropped), no possessives, plus a few common two-word phrases.

- Books (``duet.data.books``): Spurgeon's *Treasury of David* (`tdavid`), the World English Bible (`web`),
  WordNet's usage examples (`wordnet`), Jane Austen's novels (`austen`) and, in Spanish, the Reina-Valera
  (`sparv`); :func:`sourced_pool` merges any of them with the fortunes and templates, each sentence tagged with
  the collection it came from (the manifest's `text_source`).

Every function returns a sorted, de-duplicated list or is seeded, so a corpus is a function of (preset, seed).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from duet.data.books.clean import BLOCKLIST
from duet.data.manifest import split_key
from duet.errors import MissingDependency

FORTUNE_DIR = Path("/usr/share/games/fortunes")
WORDS_PATH = Path("/usr/share/dict/american-english")

# Categories of the non-offensive set that we still leave out: group jokes (ethnic, men-women), drugs and
# politics (dated, often mean), and files that are mostly not readable prose (ascii art, code, nonsense, Debian
# jargon, dictionary-style definitions, disclaimers, untranslated text). `brasil` is Portuguese (fortunes-br).
_EN_EXCLUDED = frozenset(
    "ascii-art ethnic men-women drugs politics translate-me zippy debian perl linuxcookie knghtbrd definitions "
    "disclaimer brasil".split()
)
# Spanish: proverbs (`refranes`) carry old stereotypes; graffiti (`pintadas`) is crude.
_ES_EXCLUDED = frozenset({"refranes.fortunes", "pintadas.fortunes", "varios.fortunes-pre"})

# One clean sentence per language: a capital (or opening mark) first, letters, digits and light punctuation
# inside, and a sentence-final mark. Anything else (quotes, brackets, slashes, code, dialogue) is dropped.
_LETTERS = {
    "en": "A-Za-z",
    "es": "A-Za-zÁÉÍÓÚÜÑáéíóúüñ",
    "pt-br": "A-Za-zÁÂÃÀÉÊÍÓÔÕÚÜÇáâãàéêíóôõúüç",
}
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_ATTRIBUTION = re.compile(r"^\s*(--|―|- [A-Z])")


def _sentence_pattern(language: str) -> re.Pattern[str]:
    letters = _LETTERS[language]
    opening = "¿¡" if language == "es" else ""
    return re.compile(rf"^[{opening}]?[{letters}][{letters}0-9 ,;'\-{opening}]*[{letters}0-9][.!?]$")


def _starts_upper(sentence: str) -> bool:
    return sentence.lstrip("¿¡")[:1].isupper()


def clean_sentences(fortunes: list[str], language: str, min_words: int = 3, max_words: int = 25) -> list[str]:
    """Split fortune texts into sentences and keep the clean, speakable ones (see module docstring)."""
    pattern = _sentence_pattern(language)
    out: set[str] = set()
    for fortune in fortunes:
        lines = fortune.split("\n")
        # Indented lines are poems, code or dialogue layouts; attributions ("-- Author") are not spoken text.
        if any(line.startswith(("\t", "    ")) and line.strip() and not _ATTRIBUTION.match(line) for line in lines):
            continue
        text = " ".join(line.strip() for line in lines if not _ATTRIBUTION.match(line))
        for sentence in _SENTENCE_END.split(text):
            sentence = re.sub(r"\s+", " ", sentence).strip()
            words = sentence.split()
            if not (min_words <= len(words) <= max_words) or not pattern.match(sentence) or not _starts_upper(sentence):
                continue
            if "--" in sentence or re.search(r"\b[A-Z]{2,}\b.*\b[A-Z]{2,}\b", sentence):
                continue  # dashes and shouting read badly; one acronym is fine, two is usually jargon
            if set(split_key(sentence).split()) & BLOCKLIST:
                continue
            if language == "en" and not sentence.isascii():
                continue
            out.add(sentence)
    return sorted(out)


def _read_fortune_file(path: Path) -> list[str]:
    text = path.read_bytes().decode("utf-8", errors="replace")
    return [block.strip("\n") for block in re.split(r"\n%\n", text) if block.strip()]


def _fortune_files(directory: Path, excluded: frozenset[str], package: str) -> list[Path]:
    if not directory.is_dir():
        raise MissingDependency(f"fortune texts ({directory})", f"apt-get install {package}")
    files = [
        p
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name not in excluded and p.suffix not in (".dat", ".u8") and not p.is_symlink()
    ]
    if not files:
        raise MissingDependency(f"fortune texts ({directory})", f"apt-get install {package}")
    return files


@cache
def fortune_sentences(language: str, fortune_dir: Path = FORTUNE_DIR) -> tuple[str, ...]:
    """Clean sentences from the packaged fortunes of one language: en, es or pt-br."""
    if language == "en":
        files = [p for p in _fortune_files(fortune_dir, _EN_EXCLUDED, "fortunes fortunes-min") if "." not in p.name]
    elif language == "es":
        files = [p for p in _fortune_files(fortune_dir / "es", _ES_EXCLUDED, "fortunes-es") if p.suffix == ".fortunes"]
    elif language == "pt-br":
        path = fortune_dir / "brasil"
        if not path.is_file():
            raise MissingDependency(f"Brazilian Portuguese fortunes ({path})", "apt-get install fortunes-br")
        files = [path]
    else:
        raise ValueError(f"no fortunes for language {language!r}")
    fortunes = [f for path in files for f in _read_fortune_file(path)]
    return tuple(clean_sentences(fortunes, language))


# --- templates ------------------------------------------------------------------------------------------------

_SURNAMES = (
    "Smith Johnson Lee Garcia Brown Miller Davis Wilson Taylor Clark Walker Young Allen King Wright Scott"
).split()
_FIRST = "Anna Ben Carla David Emma Frank Grace Henry Irene Jack Laura Mark Nina Oscar Paula Sam".split()
_STREETS = "Main Oak Maple Park Elm Cedar Lake Hill Pine Church Market River".split()
_MONTHS = "January February March April May June July August September October November December".split()
_MONTH_ABBR = "Jan. Feb. Mar. Apr. Aug. Sept. Oct. Nov. Dec.".split()
_CITIES = "Boston Denver Chicago Seattle Dallas Atlanta Portland Phoenix Miami Houston".split()
_THINGS = "apples books chairs tickets boxes letters bottles lamps pencils cups".split()


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _en_template(rng: random.Random) -> str:
    c = rng.choice
    r = rng.randint
    templates = [
        lambda: f"The meeting is on {c(_MONTHS)} {_ordinal(r(1, 28))}, {r(1950, 2030)}.",
        lambda: f"It happened on {c(_MONTH_ABBR)} {r(1, 28)}, {r(1900, 2024)}.",
        lambda: f"Please call me back at {r(200, 989)}-{r(1000, 9999)}.",
        lambda: f"The ticket costs ${r(2, 480)}.{r(0, 99):02d}.",
        lambda: f"Dr. {c(_SURNAMES)} will see you at {r(1, 12)}:{c([0, 15, 30, 45]):02d} {c(['am', 'pm'])}.",
        lambda: f"Mr. {c(_SURNAMES)} lives at {r(2, 990)} {c(_STREETS)} St.",
        lambda: f"Mrs. {c(_SURNAMES)} moved to {r(10, 99)} {c(_STREETS)} Ave. in {r(1960, 2023)}.",
        lambda: (
            f"Flight {c(['UA', 'AA', 'BA', 'LH'])} {r(10, 999)} to {c(_CITIES)} "
            f"leaves from gate {c('ABCDE')}{r(1, 40)}."
        ),
        lambda: f"About {r(2, 98)}% of the votes have been counted.",
        lambda: f"The temperature dropped to {r(-20, 40)} degrees last night.",
        lambda: f"In {r(1800, 2020)}, the town had {r(1, 999)},{r(0, 999):03d} people.",
        lambda: f"The train to {c(_CITIES)} arrives at {r(1, 12)}:{r(0, 59):02d}.",
        lambda: f"Order number {r(10000, 99999)} shipped on {r(1, 12)}/{r(1, 28)}/{r(2000, 2025)}.",
        lambda: f"We need {r(2, 40)} {c(_THINGS)} and {r(2, 40)} {c(_THINGS)}.",
        lambda: f"{c(_FIRST)} paid {r(3, 900)} dollars for {r(2, 12)} {c(_THINGS)}.",
        lambda: f"The U.S. team won {r(1, 9)} to {r(0, 8)} on {c(_MONTHS)} {r(1, 28)}.",
        lambda: f"Room {r(100, 999)} is on the {_ordinal(r(1, 30))} floor.",
        lambda: f"Version {r(1, 9)}.{r(0, 20)} was released in {c(_MONTHS)} {r(1995, 2025)}.",
        lambda: f"The speed limit here is {c([25, 30, 35, 45, 55, 65])} mph.",
        lambda: f"Prof. {c(_SURNAMES)} wrote {r(2, 60)} papers between {r(1970, 1995)} and {r(1996, 2024)}.",
        lambda: f"The box weighs {r(1, 90)}.{r(1, 9)} kg.",
        lambda: f"Turn left after {r(2, 9)}.{r(1, 9)} miles on Route {r(1, 99)}.",
        lambda: f"{c(_FIRST)} was born on {c(_MONTHS)} {_ordinal(r(1, 28))}, {r(1930, 2015)}.",
        lambda: f"The store opens at {r(6, 11)} a.m. and closes at {r(5, 11)} p.m.",
        lambda: f"Chapter {r(2, 40)} starts on page {r(10, 600)}.",
        lambda: f"Add {r(2, 9)} cups of flour and {r(1, 4)} tsp. of salt.",
        lambda: f"St. {c(_SURNAMES)} Hospital has {r(50, 900)} beds.",
        lambda: f"The loan was ${r(1, 99)},{r(0, 999):03d} at {r(2, 9)}.{r(0, 9)}% interest.",
    ]
    return c(templates)()


# Dutch and Kyrgyz: simple everyday frames with names, numbers and places; digits are left for espeak-ng's
# number rules in each language to read.
_NL_NAMES = "Anna Bram Daan Emma Fleur Jan Lotte Milan Noor Sanne Thijs Eva".split()
_NL_CITIES = "Amsterdam Utrecht Rotterdam Leiden Groningen Delft Haarlem Zwolle".split()
_NL_THINGS = "appels boeken stoelen kaartjes brieven flessen".split()
_KY_NAMES = "Айгүл Бакыт Нурлан Айдай Азамат Жылдыз Эрмек Чолпон Тилек Гүлнара".split()
_KY_CITIES = "Бишкекке Ошко Караколго Нарынга Таласка".split()


def _nl_template(rng: random.Random) -> str:
    c, r = rng.choice, rng.randint
    templates = [
        lambda: f"Mijn naam is {c(_NL_NAMES)}.",
        lambda: f"{c(_NL_NAMES)} is {r(3, 90)} jaar oud.",
        lambda: f"Ik heb vandaag {r(2, 30)} {c(_NL_THINGS)} gekocht.",
        lambda: f"De trein naar {c(_NL_CITIES)} vertrekt om {r(6, 23)} uur.",
        lambda: f"Wij gaan morgen met {c(_NL_NAMES)} naar {c(_NL_CITIES)}.",
        lambda: f"Het boek kost {r(5, 60)} euro.",
        lambda: f"In {c(_NL_CITIES)} wonen ongeveer {r(20, 900)} duizend mensen.",
        lambda: f"{c(_NL_NAMES)} woont al {r(2, 40)} jaar in {c(_NL_CITIES)}.",
        lambda: f"Kun je mij om {r(1, 12)} uur bellen, {c(_NL_NAMES)}?",
        lambda: f"Het is vandaag {c(['mooi', 'koud', 'warm', 'grijs', 'nat'])} weer in {c(_NL_CITIES)}.",
    ]
    return c(templates)()


def _ky_template(rng: random.Random) -> str:
    c, r = rng.choice, rng.randint
    templates = [
        lambda: f"Менин атым {c(_KY_NAMES)}.",
        lambda: f"{c(_KY_NAMES)} {r(5, 80)} жашта.",
        lambda: f"Мен дүкөндөн {r(2, 20)} алма сатып алдым.",
        lambda: f"Биз эртең {c(_KY_CITIES)} барабыз.",
        lambda: f"Китепканада {r(10, 900)} китеп бар.",
        lambda: f"Поезд саат {r(1, 12)} де жөнөйт.",
        lambda: f"{c(_KY_NAMES)} бүгүн {c(_KY_CITIES)} кетти.",
        lambda: f"Бүгүн аба ырайы {c(['жакшы', 'суук', 'жылуу'])}.",
    ]
    return c(templates)()


_TEMPLATES = {"en": _en_template, "nl": _nl_template, "ky": _ky_template}


def template_sentences(language: str, n: int, seed: int) -> list[str]:
    """Up to `n` distinct sentences from the language's templates (fewer if the templates run dry)."""
    make = _TEMPLATES[language]
    rng = random.Random(f"templates:{language}:{seed}")
    out: dict[str, None] = {}
    for _ in range(20 * n):
        if len(out) >= n:
            break
        out.setdefault(make(rng), None)
    return sorted(out)


# --- short register -------------------------------------------------------------------------------------------

_PHRASES = (
    "Thank you.",
    "Yes, please.",
    "No, thanks.",
    "Good morning.",
    "Good night.",
    "Hello there.",
    "Come in.",
    "Sit down.",
    "Well done.",
    "Of course.",
    "Not yet.",
    "Right now.",
    "Excuse me.",
    "Go ahead.",
    "Hold on.",
    "See you.",
    "Watch out.",
    "Calm down.",
    "Wake up.",
    "Good luck.",
    "Take care.",
    "Me too.",
    "Why not?",
    "Really?",
    "Okay.",
    "Sure.",
    "Maybe.",
    "Never.",
    "Always.",
    "Stop!",
    "Wait.",
    "Listen.",
    "Help!",
    "Sorry.",
    "Cheers.",
    "Welcome back.",
    "Happy birthday.",
    "Nice try.",
    "All right.",
    "Who knows?",
    "Turn left.",
    "Turn right.",
)


@cache
def dictionary_words(words_path: Path = WORDS_PATH, min_len: int = 3, max_len: int = 9) -> tuple[str, ...]:
    """Lower-case alphabetic entries of the word list: no proper nouns, no possessives."""
    if not words_path.is_file():
        raise MissingDependency(f"word list ({words_path})", "apt-get install wamerican")
    with open(words_path, encoding="utf-8", errors="replace") as f:
        words = {w.strip() for w in f}
    keep = (w for w in words if w.isascii() and w.isalpha() and w.islower() and min_len <= len(w) <= max_len)
    return tuple(sorted(w for w in keep if w not in BLOCKLIST))


def short_utterances(n: int, seed: int, words_path: Path = WORDS_PATH) -> list[str]:
    """`n` distinct one- or two-word utterances: dictionary words in a few forms, and everyday phrases."""
    words = dictionary_words(words_path)
    rng = random.Random(f"short:{seed}")
    out: dict[str, None] = {}
    for _ in range(20 * n):
        if len(out) >= n:
            break
        kind = rng.random()
        w = rng.choice(words)
        if kind < 0.45:
            text = w.capitalize() + "."
        elif kind < 0.55:
            text = w.capitalize() + "?"
        elif kind < 0.65:
            text = w
        elif kind < 0.75:
            text = f"Say {w}."
        elif kind < 0.85:
            text = f"{w.capitalize()}, please."
        else:
            text = rng.choice(_PHRASES)
        out.setdefault(text, None)
    return sorted(out)


def sentence_pool(language: str, seed: int, n_templates: int = 0) -> tuple[str, ...]:
    """All sentences a voice of `language` may read: packaged fortunes plus (en) `n_templates` template sentences,
    or (nl, ky) templates only."""
    if language == "en":
        return tuple(sorted(set(fortune_sentences("en")) | set(template_sentences("en", n_templates, seed))))
    if language in ("es", "pt-br"):
        return fortune_sentences(language)
    if language in ("nl", "ky"):
        return tuple(template_sentences(language, max(n_templates, 200), seed))
    raise ValueError(f"no text source for language {language!r}")


FORTUNES, TEMPLATES, WORDS = "fortunes", "templates", "words"  # text_source names of the first corpus's texts
EVERYDAY = "everyday"  # duet.data.everyday: greetings, requests, questions


@cache
def sourced_pool(language: str, sources: tuple[str, ...], seed: int, n_templates: int = 0,
                 ) -> tuple[tuple[str, str], ...]:
    """(sentence, source) pairs from the named collections (``fortunes``, ``templates`` or a book of
    ``duet.data.books``), de-duplicated across them in the order given (by ``split_key``, so one text never lands
    in two splits), in a seeded random order: a reader that takes the first n of it takes the first n of any
    larger n, so a preset can grow without replanning what was already rendered."""
    from duet.data.books import dedupe_across, source_sentences

    collections: dict[str, Sequence[str]] = {}
    for name in sources:
        if name == FORTUNES:
            collections[name] = fortune_sentences(language)
        elif name == TEMPLATES:
            collections[name] = template_sentences(language, n_templates, seed)
        else:
            collections[name] = source_sentences(language, name)
    pairs = sorted((text, source) for source, texts in dedupe_across(collections).items() for text in texts)
    random.Random(f"pool:{seed}:{language}").shuffle(pairs)
    return tuple(pairs)


def classic_source(text: str, language: str) -> str:
    """Which collection a sentence of the first corpus's pool (:func:`sentence_pool`) came from."""
    if language in ("nl", "ky"):
        return TEMPLATES
    return FORTUNES if text in _fortune_set(language) else TEMPLATES


@cache
def _fortune_set(language: str) -> frozenset[str]:
    return frozenset(fortune_sentences(language)) if language in ("en", "es", "pt-br") else frozenset()
