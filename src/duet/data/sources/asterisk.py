"""Asterisk PBX prompts: real recorded speech with transcripts (Debian `asterisk-core-sounds-*`).

English: Allison Smith, 568 prompts (~25 min), transcripts in
/usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz, audio from `asterisk-core-sounds-en-g722`. The same
speaker recorded the Mexican Spanish set (`-es`, ~31 min); June Wallack the Canadian French one (`-fr`, ~26 min).
Licence: CC-BY-SA 3.0 (Digium; see /usr/share/doc/asterisk-core-sounds-en/copyright).

Audio format: the best one installed is used, in this order: `sln16` / `wav16` (16 kHz PCM), `g722` (16 kHz
ADPCM, the Debian `-g722` package), then the 8 kHz `wav` / `gsm` sets.

Transcript lines are `name: text`. They carry markup that is not speech: `[ascending tones]`, `<beep>`,
`(10 seconds of silence)`, `at [@]`, notes in parentheses, typographic quotes, and in the French file one line
holding two prompts. Annotations are removed; a prompt is skipped (and counted) when nothing speakable remains or
when it relies on symbols whose reading is ambiguous (`press * or #`).
"""

from __future__ import annotations

import gzip
import hashlib
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

FORMATS = ("sln16", "wav16", "g722", "wav", "gsm")  # best first


@dataclass(frozen=True)
class AsteriskPrompts:
    """One installed Asterisk sound set."""

    language: str = "en"
    speaker: str = "asterisk-allison"
    sound_dir: Path = Path("/usr/share/asterisk/sounds/en")
    transcripts: Path = Path("/usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz")
    packages: str = "asterisk-core-sounds-en asterisk-core-sounds-en-g722"
    max_prompts: int | None = None  # a deterministic subset (by hash of the prompt name); None = all


@dataclass(frozen=True)
class Prompt:
    name: str  # e.g. "digits/7", "vm-intro"
    text: str
    path: Path


_ANNOTATION = re.compile(r"\[[^\]]*\]|<[^>]*>|\([^)]*\)")
_UNSPEAKABLE = re.compile(r"[*#@<>\[\]{}|/\\=+_~^]")
_MERGED_PROMPT = re.compile(r"[.!?]\s*[a-z0-9/_-]+: ")  # "...dièse.vm-review-nonurgent: Pour ..."


def clean_prompt(text: str) -> str | None:
    """The speakable text of a transcript entry, or None if the prompt is not a speakable sentence."""
    if _MERGED_PROMPT.search(text):
        return None
    text = _ANNOTATION.sub(" ", text)
    text = re.sub(r"[\"“”«»]", " ", text).replace("…", "...")
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"^(\.\.\.|\.)\s*", "", text)  # a leading ellipsis marks a fragment, not speech
    text = re.sub(r"\s+([,.;:!?])", r"\1", text)
    if not re.search(r"[^\W\d_]", text) or _UNSPEAKABLE.search(text):
        return None
    return text


def read_transcripts(path: Path) -> dict[str, str]:
    """name -> raw transcript text, from the plain or gzipped `core-sounds-<lang>.txt`."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    out: dict[str, str] = {}
    for line in data.decode("utf-8", errors="replace").splitlines():
        if not line.strip() or line.startswith(";") or ":" not in line:
            continue
        name, text = line.split(":", 1)
        out[name.strip()] = text.strip()
    return out


def find_audio(sound_dir: Path, name: str) -> Path | None:
    for fmt in FORMATS:
        path = sound_dir / f"{name}.{fmt}"
        if path.is_file():
            return path
    return None


def list_prompts(cfg: AsteriskPrompts) -> tuple[list[Prompt], Counter[str]]:
    """The usable prompts, and why the others were left out (reason -> count)."""
    from duet.errors import MissingDependency

    if not cfg.transcripts.is_file() or not cfg.sound_dir.is_dir():
        raise MissingDependency(f"Asterisk {cfg.language} prompts ({cfg.sound_dir})", f"apt-get install {cfg.packages}")
    prompts: list[Prompt] = []
    dropped: Counter[str] = Counter()
    for name, raw in sorted(read_transcripts(cfg.transcripts).items()):
        text = clean_prompt(raw)
        if text is None:
            dropped["not speakable"] += 1
            continue
        path = find_audio(cfg.sound_dir, name)
        if path is None:
            dropped["no audio file"] += 1
            continue
        prompts.append(Prompt(name, text, path))
    if cfg.max_prompts is not None:
        prompts = sorted(prompts, key=lambda p: hashlib.sha1(p.name.encode()).hexdigest())[: cfg.max_prompts]
        prompts.sort(key=lambda p: p.name)
    return prompts, dropped
