"""Cheap English text normalisation: write out what a reader says for digits, symbols and abbreviations.

Tiny TTS models never see enough "$3.50" to learn how it is read, so numbers, money, percentages, dates, times,
ordinals and common abbreviations become words before tokenisation. American reading throughout, no "and" inside
numbers ("one hundred twenty-three"). Pure Python, rule based, no network; anything it does not recognise is left
as written. Service tokens (``<|...|>``, inline ``[laughter]``) pass through untouched; other spellings of an
inline event (``[laugh]``, ``[Sighs]``) become its token first (``duet.text.tags.canonical_tags``).

Known limits, chosen for cheapness: a four-digit number from 1100 to 2099 without a comma is read as a year
("1999" -> "nineteen ninety-nine", "1500 meters" -> "fifteen hundred meters"); "Dr."/"St." before a capitalised
word are titles ("Doctor", "Saint"), elsewhere street names ("Drive", "Street"); dates are US month/day/year.
"""

from __future__ import annotations

import re

from duet.text.tags import canonical_tags

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ("", "thousand", "million", "billion", "trillion")
_IRREGULAR_ORDINALS = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}
_MONTHS = ("January February March April May June July August September October November December").split()
_MAX_CARDINAL = 10**15 - 1  # beyond the trillions a number is an identifier: read it digit by digit


def cardinal(n: int) -> str:
    """123 -> "one hundred twenty-three", -5 -> "minus five"."""
    if n < 0:
        return "minus " + cardinal(-n)
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + (f"-{_ONES[n % 10]}" if n % 10 else "")
    if n < 1000:
        return f"{_ONES[n // 100]} hundred" + (f" {cardinal(n % 100)}" if n % 100 else "")
    if n > _MAX_CARDINAL:
        return digits(str(n))
    words, scale = [], 0
    while n:
        n, chunk = divmod(n, 1000)
        if chunk:
            words.append(cardinal(chunk) + (f" {_SCALES[scale]}" if scale else ""))
        scale += 1
    return " ".join(reversed(words))


def ordinal(n: int) -> str:
    """21 -> "twenty-first", 100 -> "one hundredth"."""
    words = cardinal(n)
    head, _, last = words.rpartition(" ")
    stem, hyphen, unit = last.rpartition("-")
    if unit in _IRREGULAR_ORDINALS:
        unit = _IRREGULAR_ORDINALS[unit]
    elif unit.endswith("y"):
        unit = unit[:-1] + "ieth"
    else:
        unit += "th"
    return (f"{head} " if head else "") + stem + hyphen + unit


def year(n: int) -> str:
    """How a year is read: 1999 "nineteen ninety-nine", 1905 "nineteen oh five", 2005 "two thousand five"."""
    if not 1000 <= n <= 9999 or 2000 <= n <= 2009 or n % 1000 == 0:
        return cardinal(n)
    century, rest = divmod(n, 100)
    if rest == 0:
        return f"{cardinal(century)} hundred"
    if rest < 10:
        return f"{cardinal(century)} oh {_ONES[rest]}"
    return f"{cardinal(century)} {cardinal(rest)}"


def digits(s: str) -> str:
    """Digit by digit: "007" -> "zero zero seven"."""
    return " ".join(_ONES[int(c)] for c in s)


def decimal(s: str) -> str:
    """Read "3.14" as "three point one four" (digits after the point one by one)."""
    whole, _, frac = s.replace(",", "").partition(".")
    return f"{cardinal(int(whole or 0))} point {digits(frac)}"


def _plural(words: str) -> str:
    """Plural of a number word, for decades: "ninety" -> "nineties", "six" -> "sixes"."""
    if words.endswith("y"):
        return words[:-1] + "ies"
    return words + ("es" if words.endswith(("x", "s")) else "s")


def _integer(s: str) -> str:
    """A run of digits as read aloud: years, leading zeros and long identifiers get their own readings."""
    if len(s) > 1 and s.startswith("0"):
        return digits(s)
    n = int(s)
    if len(s) == 4 and 1100 <= n <= 2099:
        return year(n)
    return cardinal(n)


def _number(s: str) -> str:
    if "." in s:
        return decimal(s)
    if "," in s:
        return cardinal(int(s.replace(",", "")))  # "1,999" is a count, never a year
    return _integer(s)


# ---- money ----
_CURRENCIES = {  # symbol: (unit, units, subunit, subunits)
    "$": ("dollar", "dollars", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
    "€": ("euro", "euros", "cent", "cents"),
}
_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_MONEY_RE = re.compile(rf"([$£€])\s?({_NUM})(?:\s?(thousand|million|billion|trillion)\b)?")


def _money(m: re.Match) -> str:
    unit, units, sub, subs = _CURRENCIES[m.group(1)]
    amount, scale = m.group(2).replace(",", ""), m.group(3)
    if scale:  # "$2.5 million" -> "two point five million dollars"
        return f"{_number(amount)} {scale} {units}"
    whole, _, frac = amount.partition(".")
    if len(frac) > 2:
        return f"{decimal(amount)} {units}"
    n, cents = int(whole), int(frac.ljust(2, "0")) if frac else 0
    parts = []
    if n or not cents:
        parts.append(f"{cardinal(n)} {unit if n == 1 else units}")
    if cents:
        parts.append(f"{cardinal(cents)} {sub if cents == 1 else subs}")
    return " and ".join(parts)


# ---- dates and times ----
_DATE_RE = re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4})\b")
_TIME_RE = re.compile(r"\b(\d{1,2}):(\d{2})(?:\s?([ap])\.?m\.?(?![a-z]))?", re.IGNORECASE)
_HOUR_AMPM_RE = re.compile(r"\b(\d{1,2})\s?([ap])\.?m\.?(?![a-z])", re.IGNORECASE)


def _date(m: re.Match) -> str:
    month, day, yr = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return m.group(0)
    return f"{_MONTHS[month - 1]} {ordinal(day)}, {year(yr)}"


def _time(m: re.Match) -> str:
    hour, minute, ampm = int(m.group(1)), int(m.group(2)), m.group(3)
    if hour > 24 or minute > 59:
        return m.group(0)
    if minute == 0:
        said = cardinal(hour) + ("" if ampm else " o'clock")
    elif minute < 10:
        said = f"{cardinal(hour)} oh {_ONES[minute]}"
    else:
        said = f"{cardinal(hour)} {cardinal(minute)}"
    return said + (f" {ampm.lower()} m" if ampm else "")


# ---- abbreviations ----
# Titles come before a name; they keep the case of their first letter ("Dr." -> "Doctor").
_TITLES = {
    "Mr": "mister",
    "Mrs": "missus",
    "Ms": "miz",
    "Prof": "professor",
    "Capt": "captain",
    "Gen": "general",
    "Lt": "lieutenant",
    "Sgt": "sergeant",
    "Col": "colonel",
    "Gov": "governor",
    "Sen": "senator",
    "Rev": "reverend",
    "Mt": "mount",
    "Ft": "fort",
}
# These can end a sentence, so their period survives when the text ends or a capitalised word follows.
_SUFFIXES = {
    "Jr": "junior",
    "Sr": "senior",
    "Ave": "avenue",
    "Blvd": "boulevard",
    "Rd": "road",
    "Inc": "incorporated",
    "Ltd": "limited",
    "Corp": "corporation",
    "etc": "et cetera",
}
_LATIN = {"e.g.": "for example", "i.e.": "that is", "vs.": "versus", "approx.": "approximately"}
_TITLE_OR_PLACE = {"Dr": ("doctor", "drive"), "St": ("saint", "street")}

_TITLE_RE = re.compile(rf"\b({'|'.join(_TITLES)})\.(?=\s)")
_SUFFIX_RE = re.compile(rf"\b({'|'.join(_SUFFIXES)})\.(\s+(?=[A-Z])|\s*$)?")
_LATIN_RE = re.compile(rf"(?<![\w.])({'|'.join(re.escape(k) for k in _LATIN)})(?=\W|$)", re.IGNORECASE)
_TITLE_OR_PLACE_RE = re.compile(r"\b(Dr|St)\.(?:(\s+[A-Z])|(\s*$))?")
_NUMBER_ABBR_RE = re.compile(r"(?:\b(No|no)\.\s?|(#))(?=\d)")


def _cased(word: str, like: str) -> str:
    return word[0].upper() + word[1:] if like[0].isupper() else word


def _title_or_place(m: re.Match) -> str:
    title, place = _TITLE_OR_PLACE[m.group(1)]
    if m.group(2):  # a capitalised word follows: "Dr. Smith", "St. Louis"
        return title.capitalize() + m.group(2)
    # "Elm Dr.", "Baker St." are part of a proper name; at the very end the period also ends the sentence.
    return place.capitalize() + ("." if m.group(3) is not None else "")


def _expand_abbreviations(text: str) -> str:
    text = _LATIN_RE.sub(lambda m: _LATIN[m.group(1).lower()], text)
    text = _NUMBER_ABBR_RE.sub(lambda m: _cased("number", m.group(1) or "n") + " ", text)
    text = _TITLE_RE.sub(lambda m: _cased(_TITLES[m.group(1)], m.group(1)), text)
    text = _TITLE_OR_PLACE_RE.sub(_title_or_place, text)
    return _SUFFIX_RE.sub(
        lambda m: _cased(_SUFFIXES[m.group(1)], m.group(1)) + ("." + m.group(2) if m.group(2) is not None else ""),
        text,
    )


# ---- numbers ----
_PERCENT_RE = re.compile(rf"(?<![\d,])({_NUM})\s?%")  # the lookbehind: no quadratic rescans of long digit runs
_ORDINAL_RE = re.compile(r"(?<![\d,])\b(\d{1,3}(?:,\d{3})+|\d+)(st|nd|rd|th)\b", re.IGNORECASE)
_DECADE_RE = re.compile(r"(?:\b|')(\d{2}|\d{4})s\b")
_MINUS_RE = re.compile(r"(?<![\w.,])-(?=\d)")
_NUMBER_RE = re.compile(rf"\b(?:{_NUM})\b")


def _decade(m: re.Match) -> str:
    s = m.group(1)
    return _plural(year(int(s)) if len(s) == 4 else cardinal(int(s)))


def _expand_numbers(text: str) -> str:
    text = _DATE_RE.sub(_date, text)
    text = _TIME_RE.sub(_time, text)
    text = _HOUR_AMPM_RE.sub(lambda m: f"{cardinal(int(m.group(1)))} {m.group(2).lower()} m", text)
    text = _MINUS_RE.sub("minus ", text)
    text = _MONEY_RE.sub(_money, text)
    text = _PERCENT_RE.sub(lambda m: f"{_number(m.group(1))} percent", text)
    text = _ORDINAL_RE.sub(lambda m: ordinal(int(m.group(1).replace(",", ""))), text)
    text = _DECADE_RE.sub(_decade, text)
    return _NUMBER_RE.sub(lambda m: _number(m.group(0)), text)


# ---- the whole pass ----
_SERVICE_RE = re.compile(r"(<\|[^|<>\s]+\|>|\[[a-z_]+\])")
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u00a0": " "})
_SPACE_RE = re.compile(r"\s+")
_SPACE_BEFORE_PUNCT_RE = re.compile(r" +([,.!?;:])")


def _normalize_plain(text: str) -> str:
    text = text.translate(_QUOTES)
    text = _expand_abbreviations(text)
    text = _expand_numbers(text)
    text = text.replace("&", " and ")
    return text


def normalize_text(text: str) -> str:
    """Words for digits, money, percentages, dates, times, ordinals and abbreviations; one space between words."""
    pieces = _SERVICE_RE.split(canonical_tags(text))  # odd indices are service tokens, kept verbatim
    text = "".join(p if i % 2 else _normalize_plain(p) for i, p in enumerate(pieces))
    text = _SPACE_RE.sub(" ", text).strip()
    return _SPACE_BEFORE_PUNCT_RE.sub(r"\1", text)
