"""Jane Austen's six novels from the R package janeaustenr, read without R.

Source and licence (from /usr/share/doc/r-cran-janeaustenr/copyright): `r-cran-janeaustenr`, MIT licence,
Copyright 2016-2017 Julia Silge; the novels themselves (1811-1817) are in the public domain.

Layout of an R lazy-load database (`data/Rdata.rdx` + `data/Rdata.rdb`):
- `Rdata.rdx` is an R object serialized with `saveRDS`, so gzip-compressed (bzip2 or xz, or none, are possible
  too): a named list with `variables` (a named list, one integer vector `c(offset, length)` per object),
  `references` and `compressed` (TRUE for zlib; 2 or 3 for the typed variants below).
- `Rdata.rdb` holds each object at its (offset, length): a 4-byte big-endian uncompressed length, then for
  `compressed = TRUE` a zlib stream; for 2 or 3 a type byte first ("Z" xz, "2" bzip2, "1" zlib, "0" none).
- The decompressed bytes are one XDR serialization, see `unserialize`.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import re
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from duet.errors import DuetError, MissingDependency

AUSTEN_DIR = Path("/usr/lib/R/site-library/janeaustenr/data")
NOVELS = ("sensesensibility", "prideprejudice", "mansfieldpark", "emma", "northangerabbey", "persuasion")

# SEXP types (R Internals, "Serialization formats").
NILSXP, SYMSXP, LISTSXP, LANGSXP, CHARSXP = 0, 1, 2, 6, 9
LGLSXP, INTSXP, REALSXP, CPLXSXP, STRSXP, VECSXP, EXPRSXP, RAWSXP = 10, 13, 14, 15, 16, 19, 20, 24
REFSXP, NILVALUE_SXP, GLOBALENV_SXP, UNBOUNDVALUE_SXP, MISSINGARG_SXP = 255, 254, 253, 252, 251
BASENAMESPACE_SXP, EMPTYENV_SXP, BASEENV_SXP = 250, 242, 241
_SINGLETONS = {
    NILVALUE_SXP,
    GLOBALENV_SXP,
    UNBOUNDVALUE_SXP,
    MISSINGARG_SXP,
    BASENAMESPACE_SXP,
    EMPTYENV_SXP,
    BASEENV_SXP,
}
_PAIRLISTS = {LISTSXP, LANGSXP}
HAS_ATTR, HAS_TAG = 1 << 9, 1 << 10
NA_INTEGER = -(2**31)
_CHARSXP_ENCODING = ((1 << 3, "utf-8"), (1 << 2, "latin-1"), (1 << 6, "ascii"))  # levels bit -> codec


@dataclass(frozen=True)
class RSymbol:
    """An R symbol (a name), as used for list tags and attribute names."""

    name: str


@dataclass
class RObject:
    """An R vector or pairlist: its SEXP type, elements, attributes and (pairlists only) element tags."""

    sexptype: int
    values: list[Any]
    attributes: dict[str, Any] = field(default_factory=dict)
    tags: list[str | None] = field(default_factory=list)

    def named(self) -> dict[str, Any]:
        """The elements by their `names` attribute (or by their tags for a pairlist)."""
        names = self.attributes["names"].values if "names" in self.attributes else self.tags
        return dict(zip(names, self.values, strict=True))


class _Reader:
    """A cursor over XDR bytes: big-endian 4-byte ints, 8-byte doubles, raw byte strings."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0
        self.refs: list[RSymbol] = []

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise DuetError("R serialization ends early")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def i32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def length(self) -> int:
        n = self.i32()
        return n if n != -1 else (self.i32() << 32) + (self.i32() & 0xFFFFFFFF)

    def item(self) -> Any:
        return self.dispatch(self.i32())

    def dispatch(self, flags: int) -> Any:
        kind = flags & 0xFF
        if kind in _SINGLETONS or kind == NILSXP:
            return None
        if kind == REFSXP:
            index = flags >> 8 or self.i32()
            return self.refs[index - 1]
        if kind == SYMSXP:
            symbol = RSymbol(self.item() or "")
            self.refs.append(symbol)
            return symbol
        if kind in _PAIRLISTS:
            return self.pairlist(flags)
        if kind == CHARSXP:
            return self.charsxp(flags)
        values = self.vector(kind)
        attributes = self.attributes() if flags & HAS_ATTR else {}
        return RObject(kind, values, attributes)

    def charsxp(self, flags: int) -> str | None:
        n = self.i32()
        text = None if n == -1 else self.take(n)
        if flags & HAS_ATTR:
            self.item()  # R reads and drops a CHARSXP's attributes
        if text is None:
            return None
        levels = flags >> 12
        codec = next((c for bit, c in _CHARSXP_ENCODING if levels & bit), "utf-8")
        return text.decode(codec, errors="replace")

    def vector(self, kind: int) -> list[Any]:
        n = self.length()
        if kind in (LGLSXP, INTSXP):
            return [None if v == NA_INTEGER else v for v in struct.unpack(f">{n}i", self.take(4 * n))]
        if kind == REALSXP:
            return list(struct.unpack(f">{n}d", self.take(8 * n)))
        if kind == CPLXSXP:
            parts = struct.unpack(f">{2 * n}d", self.take(16 * n))
            return [complex(parts[i], parts[i + 1]) for i in range(0, 2 * n, 2)]
        if kind in (STRSXP, VECSXP, EXPRSXP):
            return [self.item() for _ in range(n)]
        if kind == RAWSXP:
            return list(self.take(n))
        raise DuetError(f"R serialization: SEXP type {kind} is not supported")

    def attributes(self) -> dict[str, Any]:
        pairlist = self.item()
        return pairlist.named() if isinstance(pairlist, RObject) else {}

    def pairlist(self, flags: int) -> RObject:
        """A pairlist read cell by cell (each cdr is the next cell), so a long one does not recurse deeply."""
        out = RObject(flags & 0xFF, [])
        while (flags & 0xFF) in _PAIRLISTS:
            if flags & HAS_ATTR:
                out.attributes.update(self.attributes())
            tag = self.item() if flags & HAS_TAG else None
            out.tags.append(tag.name if isinstance(tag, RSymbol) else None)
            out.values.append(self.item())
            flags = self.i32()
        if self.dispatch(flags) is not None:
            raise DuetError("R serialization: a dotted pairlist is not supported")
        return out


def unserialize(data: bytes) -> Any:
    """One object from R's XDR serialization (`serialize(x, NULL, xdr = TRUE)`, versions 2 and 3).

    Layout: "X\\n", then big-endian int32 format version, writer R version and minimal reader R version; version 3
    adds an int32 length and the native encoding's name. Then one item: an int32 of flags (bits 0-7 SEXP type,
    bit 8 is-object, bit 9 has-attributes, bit 10 has-tag, bits 12+ "levels", which for a CHARSXP hold its
    encoding), followed by the type's payload: a length (int32; -1 then two int32 for a long vector) and the
    elements for vectors (a CHARSXP's bytes, with length -1 for NA), the symbol's CHARSXP for a SYMSXP, and for
    a pairlist cell its attributes, tag and car, then its cdr as the next item. Vector attributes follow the
    elements as a pairlist. A REFSXP points back (1-based, in its upper flag bits or the next int32) at an
    earlier symbol. Returns None for NULL, str (or None for NA) for a CHARSXP, `RSymbol`, or `RObject`.
    """
    if data[:2] != b"X\n":
        raise DuetError("not an R XDR serialization (expected 'X\\n')")
    reader = _Reader(data)
    reader.pos = 2
    version = reader.i32()
    reader.take(8)  # the writer's and the minimal reader's R versions
    if version not in (2, 3):
        raise DuetError(f"R serialization version {version} is not supported")
    if version == 3:
        reader.take(reader.i32())
    return reader.item()


def _decompress_rds(data: bytes) -> bytes:
    """The serialized bytes of an .rds file, whichever compression `saveRDS` used."""
    if data[:2] == b"\x1f\x8b":
        return gzip.decompress(data)
    if data[:3] == b"BZh":
        return bz2.decompress(data)
    if data[:6] == b"\xfd7zXZ\x00":
        return lzma.decompress(data)
    return data


def _decompress_chunk(chunk: bytes, compressed: Any) -> bytes:
    """One object of an .rdb: a 4-byte length, then zlib (TRUE) or a type byte and its stream (2, 3)."""
    body = chunk[4:]
    if compressed in (True, 1):
        return zlib.decompress(body)
    kind, body = body[:1], body[1:]
    decompress: dict[bytes, Callable[[bytes], bytes]] = {
        b"Z": lzma.decompress,
        b"2": bz2.decompress,
        b"1": zlib.decompress,
        b"0": bytes,
    }
    if kind not in decompress:
        raise DuetError(f"R lazy-load database: unknown compression type {kind!r}")
    return decompress[kind](body)


def read_lazyload(stem: Path, names: tuple[str, ...]) -> dict[str, Any]:
    """The objects `names` of the lazy-load database `stem`.rdx / `stem`.rdb."""
    index = unserialize(_decompress_rds(stem.with_suffix(".rdx").read_bytes())).named()
    variables = index["variables"].named()
    compressed = index["compressed"].values[0] if isinstance(index.get("compressed"), RObject) else True
    out: dict[str, Any] = {}
    with open(stem.with_suffix(".rdb"), "rb") as f:
        for name in names:
            offset, length = variables[name].values
            f.seek(offset)
            out[name] = unserialize(_decompress_chunk(f.read(length), compressed))
    return out


def novel_lines(austen_dir: Path = AUSTEN_DIR) -> dict[str, list[str]]:
    """Each novel's lines of text (an empty line between paragraphs), by janeaustenr's object name."""
    stem = austen_dir / "Rdata"
    if not (stem.with_suffix(".rdx").is_file() and stem.with_suffix(".rdb").is_file()):
        raise MissingDependency(f"Jane Austen's novels ({austen_dir})", "apt-get install r-cran-janeaustenr")
    return {name: [line or "" for line in obj.values] for name, obj in read_lazyload(stem, NOVELS).items()}


_HEADING = re.compile(r"^(chapter|volume|book)\s+[\divxlc]+\.?$|^(the end|finis)\.?$", re.IGNORECASE)


def paragraphs(lines: list[str]) -> list[str]:
    """Lines joined into paragraphs at blank lines; headings (chapter, volume, upper-case titles) dropped."""
    out: list[str] = []
    current: list[str] = []
    for line in [*lines, ""]:
        if line.strip():
            current.append(line.strip())
            continue
        text = " ".join(current)
        current = []
        if text and not _HEADING.match(text) and not text.isupper():
            out.append(text)
    return out


def novel_paragraphs(austen_dir: Path = AUSTEN_DIR) -> list[str]:
    """The paragraphs of all six novels."""
    return [p for lines in novel_lines(austen_dir).values() for p in paragraphs(lines)]
