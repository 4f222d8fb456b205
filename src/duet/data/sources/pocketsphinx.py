"""pocketsphinx test recordings with transcripts (Debian `pocketsphinx-testdata`; BSD licence).

Three small sets, 16 kHz, about 37 s in all:
- `librivox/`: five sentences of *Sense and Sensibility* read by one LibriVox reader;
- `cards/`: five card names ("four queen of clubs");
- `goforward.raw`: "go forward ten meters" (headerless 16-bit 16 kHz; its text is the one sentence of
  `goforward.gram`).
The other raw files there have no transcript and are not used. Transcripts are lower case without punctuation,
as the recordings were transcribed; they are kept that way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from duet.errors import MissingDependency

_LINE = re.compile(r"^(?:<s>)?\s*(.*?)\s*(?:</s>)?\s*\(([^)]+)\)\s*$")


@dataclass(frozen=True)
class PocketsphinxTestdata:
    root: Path = Path("/usr/share/pocketsphinx/test/data")
    max_items: int | None = None  # the first N recordings (sorted by id); None = all


@dataclass(frozen=True)
class Recording:
    speaker: str
    name: str
    text: str
    path: Path


def parse_transcription(path: Path) -> dict[str, str]:
    """`<s> words </s> (fileid)` lines -> fileid -> words."""
    out = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        m = _LINE.match(line.strip())
        if m and m.group(1):
            out[m.group(2)] = re.sub(r"\s+", " ", m.group(1))
    return out


def list_recordings(cfg: PocketsphinxTestdata) -> list[Recording]:
    root = cfg.root
    if not (root / "librivox" / "transcription").is_file():
        raise MissingDependency(f"pocketsphinx test data ({root})", "apt-get install pocketsphinx-testdata")
    found = []
    sets = (("librivox", "librivox/transcription"), ("cards", "cards/cards.transcription"))
    for name, transcription in sets:
        path = root / transcription
        if not path.is_file():
            continue
        for file_id, text in sorted(parse_transcription(path).items()):
            found.append(Recording(f"pocketsphinx-{name}", f"{name}-{file_id}", text, root / name / f"{file_id}.wav"))
    gram = root / "goforward.gram"
    if gram.is_file() and (root / "goforward.raw").is_file():
        m = re.search(r"=\s*([a-z ]+);", gram.read_text(errors="replace"))
        if m:
            found.append(Recording("pocketsphinx-turtle", "goforward", m.group(1).strip(), root / "goforward.raw"))
    found.sort(key=lambda r: r.name)
    return found[: cfg.max_items] if cfg.max_items is not None else found
