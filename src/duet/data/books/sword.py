"""A reader for compressed SWORD modules (zText Bibles, zCom commentaries), written from the format description.

Sources and licences (from each package's /usr/share/doc/<package>/copyright):
- `web`: `sword-text-web`, the World English Bible with Deuterocanon (module engWEB2015eb): public domain
  ("World English Bible" is a trademark of eBible.org; a changed text must not carry that name).
- `sparv`: `sword-text-sparv`, the Spanish Reina-Valera Bible of 1909 (module spaRV1909eb): public domain.
- `tdavid`: `sword-comm-tdavid`, C. H. Spurgeon's Treasury of David (module TDavid, final volume 1885): public
  domain.

Layout. `<root>/mods.d/*.conf` describes each module in INI form: a `[Name]` section header, then `Key=Value`
lines, among them `DataPath` (relative to root), `ModDrv` (zText, zText4, zCom, zCom4), `CompressType` (ZIP,
BZIP2 or XZ), `Encoding` (UTF-8; Latin-1 when absent), `SourceType` (OSIS, ThML, GBF) and `BlockType` (BOOK,
CHAPTER, VERSE: how much text shares one compressed block; a reader needs only the indexes below). The data
directory holds three files per testament (`ot.` and `nt.`), with prefix `bz` for zText and `cz` for zCom:
- `*.?zs` block index: 12 bytes per block, little-endian u32 offset into `*.?zz`, u32 compressed size, u32
  uncompressed size.
- `*.?zz` the compressed blocks, concatenated.
- `*.?zv` entry index, one per key in versification order (testament heading, book headings, chapter headings,
  verses): u32 block number, u32 offset in the uncompressed block, then the entry's size in bytes as u16
  (10 bytes per entry: zText, zCom) or u32 (12 bytes: zText4, zCom4). Size 0 is an empty entry.
A reader needs no versification: the entries are read in file order and joined into running text.

Markup. Notes (`<note>`, GBF `<RF>...<Rf>`), headings (`<title>`), speaker labels, glossary keywords and
alternate readings are removed with their content; a Bible reference (`<reference>`, ThML `<scripRef>`) becomes
`REFERENCE_MARK`, so a sentence that cites one is dropped by the cleaner, and a bracket holding nothing but
references is removed, so the sentence around it survives. Paragraph and chapter markers become line breaks,
other tags vanish, and HTML entities are unescaped. Divine names set in capitals ("LORD", "JEHOVAH", printed in
small capitals in the King James tradition) are read as ordinary names ("Lord", "Jehovah").
"""

from __future__ import annotations

import bz2
import html
import lzma
import re
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from duet.errors import DuetError, MissingDependency

SWORD_ROOT = Path("/usr/share/sword")
REFERENCE_MARK = "†"

_BLOCK = struct.Struct("<III")  # offset, compressed size, uncompressed size
_ENTRY = {2: struct.Struct("<IIH"), 4: struct.Struct("<III")}  # block, offset in block, size (u16 or u32)
_DRIVERS = {"ztext": ("bz", 2), "ztext4": ("bz", 4), "zcom": ("cz", 2), "zcom4": ("cz", 4)}
_DECOMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "ZIP": zlib.decompress,
    "BZIP2": bz2.decompress,
    "XZ": lzma.decompress,
}


@dataclass(frozen=True)
class SwordModule:
    """Where one module's files are and how to read them, from its `mods.d` conf."""

    name: str
    data_dir: Path
    driver: str
    compress: str
    encoding: str
    markup: str


def read_conf(path: Path) -> tuple[str, dict[str, str]]:
    """The section name and the `Key=Value` pairs of one conf file (a repeated key keeps its last value)."""
    name, values = "", dict[str, str]()
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]") and not name:
            name = line[1:-1]
        elif "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip()
    return name, values


def find_module(name: str, package: str, root: Path = SWORD_ROOT) -> SwordModule:
    """The module called `name` (case-insensitive) under `root`; MissingDependency names `package` if absent."""
    for conf in sorted((root / "mods.d").glob("*.conf")):
        section, values = read_conf(conf)
        if section.lower() != name.lower():
            continue
        module = SwordModule(
            name=section,
            data_dir=root / values.get("DataPath", "").removeprefix("./"),
            driver=values.get("ModDrv", ""),
            compress=values.get("CompressType", "ZIP").upper(),
            encoding=values.get("Encoding", "Latin-1"),
            markup=values.get("SourceType", "Plain"),
        )
        if not module.data_dir.is_dir():
            break
        if module.driver.lower() not in _DRIVERS or module.compress not in _DECOMPRESS or "CipherKey" in values:
            raise DuetError(f"SWORD module {section}: unsupported driver {module.driver}/{module.compress}")
        return module
    raise MissingDependency(f"SWORD module {name} ({root})", f"apt-get install {package}")


def read_testament(module: SwordModule, testament: str) -> list[str]:
    """Every entry of one testament ("ot" or "nt") in file order, decoded; [] when the testament is absent."""
    prefix, size_bytes = _DRIVERS[module.driver.lower()]
    stem = module.data_dir / f"{testament}.{prefix}"
    paths = [stem.with_name(stem.name + suffix) for suffix in "szv"]
    if not all(p.is_file() for p in paths):
        return []
    block_index, blob, entry_index = (p.read_bytes() for p in paths)
    blocks = [_BLOCK.unpack_from(block_index, i) for i in range(0, len(block_index) - 11, _BLOCK.size)]
    decompress = _DECOMPRESS[module.compress]
    encoding = "utf-8" if module.encoding.upper().replace("-", "") == "UTF8" else "latin-1"
    entry = _ENTRY[size_bytes]
    cache: dict[int, bytes] = {}
    entries: list[str] = []
    for i in range(0, len(entry_index) - entry.size + 1, entry.size):
        block, start, size = entry.unpack_from(entry_index, i)
        if size == 0 or block >= len(blocks):
            entries.append("")
            continue
        if block not in cache:
            offset, compressed, _ = blocks[block]
            cache[block] = decompress(blob[offset : offset + compressed])
        entries.append(cache[block][start : start + size].decode(encoding, errors="replace"))
    return entries


def read_entries(module: SwordModule) -> list[str]:
    """All entries of a module: the Old Testament's, then the New Testament's."""
    return read_testament(module, "ot") + read_testament(module, "nt")


_DROP_WITH_CONTENT = re.compile(
    r"<(note|title|speaker|rdg)\b[^>]*(?<!/)>.*?</\1>|<seg\b[^>]*keyword[^>]*>.*?</seg>|<RF>.*?<Rf>",
    re.DOTALL | re.IGNORECASE,
)
_REFERENCE = re.compile(r"<(reference|scripRef)\b[^>]*(?<!/)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_ONLY_REFERENCES = re.compile(rf"\([\s{REFERENCE_MARK},;:.\-–]*\)")
_BREAK = re.compile(r"<(?:/?(?:div|p|chapter|item|list|lg|br)|lb)\b[^>]*>|<CM>", re.IGNORECASE)
_TAG = re.compile(r"<[^>]*>")
_DIVINE_NAME = re.compile(r"\b(?:LORD|GOD|JEHOVAH|JEHOVÁ)\b")


def strip_markup(text: str) -> str:
    """Plain text of OSIS, ThML or GBF markup; paragraphs separated by "\\n" (see the module docstring)."""
    text = _DROP_WITH_CONTENT.sub(" ", text)
    text = _REFERENCE.sub(REFERENCE_MARK, text)
    text = _ONLY_REFERENCES.sub("", text)
    text = _BREAK.sub("\n", text)
    text = _TAG.sub("", text)
    text = _DIVINE_NAME.sub(lambda m: m[0].title(), text)
    return html.unescape(text)


def module_paragraphs(name: str, package: str, root: Path = SWORD_ROOT) -> list[str]:
    """The module's running text as paragraphs: entries joined, then split at paragraph markers."""
    text = " ".join(read_entries(find_module(name, package, root)))
    return [p for p in (line.strip() for line in strip_markup(text).split("\n")) if p]
