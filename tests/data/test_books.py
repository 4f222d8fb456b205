"""Book sources: the SWORD reader, the R unserializer and the cleaner on hand-made bytes, then each installed
Debian package end to end (skipped, with the package named, where it is not installed)."""

from __future__ import annotations

import gzip
import re
import struct
import zlib
from pathlib import Path

import pytest

from duet.data.books import austen, book_sentences, dedupe_across, source_sentences, sword, wordnet
from duet.data.books.clean import clean_paragraphs, is_speakable, normalise, split_sentences
from duet.data.manifest import split_key
from duet.errors import MissingDependency

# --- cleaner ----------------------------------------------------------------------------------------------------


def test_normalise_quotes_dashes_and_apostrophes():
    text = "“I am,” said he—“quite sure.”  ‘Tis Darcy’s   _own_ house, the Bennets’ horse."
    assert normalise(text) == "I am, said he, quite sure. Tis Darcy's own house, the Bennets horse."


def test_split_sentences_keeps_titles_and_initials_inside():
    text = "Mr. Darcy bowed. Mrs. Bennet and Dr. Jones met A. R. Fausset at St. Paul's. Did they? yes."
    assert split_sentences(text) == [
        "Mr. Darcy bowed.",
        "Mrs. Bennet and Dr. Jones met A. R. Fausset at St. Paul's.",
        "Did they? yes.",
    ]


@pytest.mark.parametrize(
    "sentence, language, keep",
    [
        ("In the beginning, God created the heavens and the earth.", "en", True),
        ("¿Es muerto el niño, dijo David?", "es", True),
        ("Too short here.", "en", False),
        ("The LORD is my shepherd, I shall not want.", "en", False),
        ("As it is written in Ps 23:1, he leads.", "en", False),
        ("He wrote this (in the margin) for us.", "en", False),
        ("it starts in lower case, sadly.", "en", False),
        ("No final mark at the end here", "en", False),
        ("Johann David Frisch, 1731.", "en", False),
        ("The Hebrew word is ygtld a tld indeed.", "en", False),
        ("The word mentioned is naïve enough.", "en", False),
        ("And then he went to hell and back.", "en", False),
    ],
)
def test_is_speakable(sentence, language, keep):
    assert is_speakable(sentence, language) is keep


def test_clean_paragraphs_sorts_and_dedupes_by_split_key():
    paragraphs = ["The cat sat down. The cat sat down!", "3. A dog ran far away.", "the cat sat down."]
    assert clean_paragraphs(paragraphs, "en") == ("A dog ran far away.", "The cat sat down!")


def test_dedupe_across_keeps_the_first_source():
    out = dedupe_across({"a": ["One two three four.", "Five six seven eight."], "b": ["one two three four!", "New."]})
    assert out == {"a": ("One two three four.", "Five six seven eight."), "b": ("New.",)}


# --- SWORD ------------------------------------------------------------------------------------------------------

_OSIS_ENTRIES = [
    "",
    "",
    '<chapter n="1" osisID="Gen.1" sID="Gen.1"/>',
    '<w lemma="strong:H1">In</w> the beginning was a test<note placement="foot">hidden note</note>.',
    'It was good; see <reference osisRef="Gen.1.1">Gen 1:1</reference>.',
    "",
    '<title type="x-s">Heading</title><div sID="p1" type="x-p"/>A second paragraph, said the LORD '
    '(<reference osisRef="Ps.1.1">Ps 1:1</reference>). It is &quot;fine&quot; now.',
]


def _write_module(root: Path, driver: str, entries: list[str]) -> None:
    """A one-testament module: entries 0-3 in block 0, the rest in block 1 (see sword.py for the layout)."""
    prefix, size_format = {"zText": ("bz", "H"), "zCom4": ("cz", "I")}[driver]
    data = root / "modules" / "tiny"
    data.mkdir(parents=True)
    (root / "mods.d").mkdir()
    (root / "mods.d" / "tiny.conf").write_text(
        f"[Tiny]\nDataPath=./modules/tiny/\nModDrv={driver}\nCompressType=ZIP\nEncoding=UTF-8\nSourceType=OSIS\n"
    )
    groups = [entries[:4], entries[4:]]
    block_index, blob, entry_index = b"", b"", b""
    for block, group in enumerate(groups):
        raw = b""
        for text in group:
            encoded = text.encode()
            entry_index += struct.pack(f"<II{size_format}", block, len(raw), len(encoded))
            raw += encoded
        compressed = zlib.compress(raw)
        block_index += struct.pack("<III", len(blob), len(compressed), len(raw))
        blob += compressed
    for suffix, content in (("s", block_index), ("z", blob), ("v", entry_index)):
        (data / f"ot.{prefix}{suffix}").write_bytes(content)


@pytest.mark.parametrize("driver", ["zText", "zCom4"])
def test_sword_reader_on_a_synthetic_module(tmp_path, driver):
    _write_module(tmp_path, driver, _OSIS_ENTRIES)
    module = sword.find_module("tiny", "sword-text-tiny", root=tmp_path)
    assert sword.read_entries(module) == _OSIS_ENTRIES  # no nt.* files: the New Testament is empty
    paragraphs = sword.module_paragraphs("TINY", "sword-text-tiny", root=tmp_path)
    assert len(paragraphs) == 2 and not any("hidden" in p or "Heading" in p for p in paragraphs)
    assert clean_paragraphs(paragraphs, "en") == (
        "A second paragraph, said the Lord.",
        "In the beginning was a test.",
        "It is fine now.",
    )


def test_strip_markup_thml_and_gbf():
    text = 'Grace<scripRef passage="Rom 1:7">Ro 1:7</scripRef> be<RF>a footnote<Rf> with you<br/>Amen &amp; amen'
    assert sword.strip_markup(text) == f"Grace{sword.REFERENCE_MARK} be  with you\nAmen & amen"


def test_missing_packages_raise(tmp_path):
    with pytest.raises(MissingDependency, match="sword-text-web"):
        sword.find_module("engWEB2015eb", "sword-text-web", root=tmp_path)
    with pytest.raises(MissingDependency, match="wordnet-base"):
        wordnet.examples(tmp_path)
    with pytest.raises(MissingDependency, match="r-cran-janeaustenr"):
        austen.novel_lines(tmp_path)


def test_wordnet_gloss_examples():
    line = (
        "01235463 04 n 03 vengeance 0 retribution 1 payback 0 002 @ 01235258 n 0000 | the act of taking revenge; "
        '"Vengeance is mine"--Romans 12:19; "he swore vengeance"  \n'
    )
    sentences = [wordnet.as_sentence(e) for e in wordnet.gloss_examples(line)]
    assert sentences == ["Vengeance is mine.", "He swore vengeance."]
    assert wordnet.gloss_examples("  1 This software and database is provided | not a synset\n") == []


# --- R serialization ----------------------------------------------------------------------------------------------


def _i32(*values: int) -> bytes:
    return struct.pack(f">{len(values)}i", *values)


def _flags(sexptype: int, attr: bool = False, tag: bool = False, levels: int = 0) -> bytes:
    return _i32(sexptype | attr << 9 | tag << 10 | levels << 12)


def _char(text: str | None) -> bytes:
    if text is None:
        return _flags(9) + _i32(-1)
    raw = text.encode()
    return _flags(9, levels=8) + _i32(len(raw)) + raw  # levels 8: UTF-8


def _strings(items, attributes: bytes = b"") -> bytes:
    return _flags(16, attr=bool(attributes)) + _i32(len(items)) + b"".join(_char(s) for s in items) + attributes


def _names(symbol: bytes, names) -> bytes:
    """A pairlist with one cell tagged `names` (a SYMSXP the first time, a REFSXP after), ending in NILVALUE."""
    return _flags(2, tag=True) + symbol + _strings(names) + _i32(254)


_NAMES_SYMBOL = _flags(1) + _char("names")
_NAMES_REF = _i32(1 << 8 | 255)  # REFSXP: the first symbol read


def _serialize(item: bytes, version: int) -> bytes:
    header = b"X\n" + _i32(version, 0x040202, 0x020300)
    return header + (_i32(5) + b"UTF-8" if version == 3 else b"") + item


def _example_list() -> bytes:
    """list(a = c("x", NA, "é"), b = c(1L, NA, 3L), c = c(1.5, -2), d = TRUE, e = c(k = 7L)), by hand."""
    elements = [
        _strings(["x", None, "é"]),
        _flags(13) + _i32(3, 1, -(2**31), 3),
        _flags(14) + _i32(2) + struct.pack(">2d", 1.5, -2.0),
        _flags(10) + _i32(1, 1),
        _flags(13, attr=True) + _i32(1, 7) + _names(_NAMES_SYMBOL, ["k"]),  # read before the list's own names
    ]
    return _flags(19, attr=True) + _i32(5) + b"".join(elements) + _names(_NAMES_REF, list("abcde"))


@pytest.mark.parametrize("version", [2, 3])
def test_unserialize_hand_made_xdr(version):
    obj = austen.unserialize(_serialize(_example_list(), version)).named()
    assert obj["a"].values == ["x", None, "é"]
    assert obj["b"].values == [1, None, 3]
    assert obj["c"].values == [1.5, -2.0]
    assert obj["d"].values == [1]
    assert obj["e"].named() == {"k": 7}


def test_austen_paragraphs_from_a_synthetic_lazyload_db(tmp_path):
    novel = ["CHAPTER I", "", "It was a bright day, and", "she walked out.  Mr. Knightley followed her.", "", ""]
    chunks, variables = b"", []
    for _ in austen.NOVELS:
        raw = _serialize(_strings(novel), 3)
        chunk = struct.pack(">I", len(raw)) + zlib.compress(raw)
        variables.append(_flags(13) + _i32(2, len(chunks), len(chunk)))
        chunks += chunk
    n = len(variables)
    variables_list = _flags(19, attr=True) + _i32(n) + b"".join(variables) + _names(_NAMES_SYMBOL, austen.NOVELS)
    index = (
        _flags(19, attr=True)
        + _i32(3)
        + variables_list
        + _i32(254)
        + _flags(10)
        + _i32(1, 1)
        + _names(_NAMES_REF, ["variables", "references", "compressed"])
    )
    (tmp_path / "Rdata.rdx").write_bytes(gzip.compress(_serialize(index, 3)))
    (tmp_path / "Rdata.rdb").write_bytes(chunks)
    paragraph = "It was a bright day, and she walked out.  Mr. Knightley followed her."
    assert austen.novel_paragraphs(tmp_path) == [paragraph] * 6


# --- installed packages -------------------------------------------------------------------------------------------

_INSTALLED = [
    (
        "en",
        "web",
        "sword-text-web",
        sword.SWORD_ROOT / "mods.d" / "engWEB2015eb.conf",
        30_000,
        [
            "In the beginning, God created the heavens and the earth.",
            "For God so loved the world, that he gave his only born Son, that whoever believes in him should not "
            "perish, but have eternal life.",
        ],
    ),
    (
        "en",
        "tdavid",
        "sword-comm-tdavid",
        sword.SWORD_ROOT / "mods.d" / "tdavid.conf",
        40_000,
        ["May the like benediction rest on us!", "The word translated blessed is a very expressive one."],
    ),
    ("en", "wordnet", "wordnet-base", wordnet.WORDNET_DIR / "data.noun", 20_000, ["Every cloud has a silver lining."]),
    (
        "en",
        "austen",
        "r-cran-janeaustenr",
        austen.AUSTEN_DIR / "Rdata.rdb",
        13_000,
        [
            "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in "
            "want of a wife."
        ],
    ),
    (
        "es",
        "sparv",
        "sword-text-sparv",
        sword.SWORD_ROOT / "mods.d" / "spaRV1909eb.conf",
        15_000,
        [
            "En el principio crió Dios los cielos y la tierra.",
            "Porque de tal manera amó Dios al mundo, que ha dado á su Hijo unigénito, para que todo aquel que "
            "en él cree, no se pierda, mas tenga vida eterna.",
        ],
    ),
]


def _skip_unless(path: Path, package: str) -> None:
    if not path.exists():
        pytest.skip(f"Debian package {package} is not installed ({path} missing)")


@pytest.mark.parametrize("language, source, package, path, floor, known", _INSTALLED, ids=[s[1] for s in _INSTALLED])
def test_installed_source(language, source, package, path, floor, known):
    _skip_unless(path, package)
    sentences = source_sentences(language, source)
    assert len(sentences) > floor
    assert set(known) <= set(sentences)
    assert list(sentences) == sorted(sentences)
    assert len({split_key(s) for s in sentences}) == len(sentences)
    assert not [s for s in sentences if re.search(r"[<>&{}\[\]()†]", s) or not 4 <= len(s.split()) <= 30]


def test_english_sources_together():
    for language, _, package, path, _, _ in _INSTALLED:
        if language == "en":
            _skip_unless(path, package)
    sources = book_sentences("en")
    assert list(sources) == ["tdavid", "web", "wordnet", "austen"]
    assert sum(len(s) for s in dedupe_across(sources).values()) >= 80_000
