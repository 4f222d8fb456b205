"""What a DATA folder holds: its clips (an id, an audio file, a transcript), whichever of three layouts it has.

- **LJSpeech** (what Piper's trainer reads too): ``metadata.csv`` with one ``id|text`` or ``id|text|normalized`` line
  per clip (no header, no quoting; the normalised text is read when the line has one), audio in ``wavs/<id>.wav``
  (``.flac`` and ``.ogg`` are found too);
- **pairs**: ``NAME.wav`` (or ``.flac``, ``.ogg``, ``.mp3``) next to ``NAME.txt`` holding its transcript, in the
  folder or any folder below it;
- **a duet manifest** (``duet.data.manifest``): ``manifest.jsonl``, or the folder holding it; each line's audio is
  relative to it.

Nothing is dropped here without a trace: an audio file without a transcript, a transcript without audio and an id
seen twice become clips whose ``problem`` says so, and the checks (``duet.voice.checks``) list them in the report
with the rest. DATA is only read.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from duet.errors import DuetError

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3")  # what libsndfile reads (soundfile)
METADATA = "metadata.csv"
MANIFEST = "manifest.jsonl"
LAYOUTS = ("ljspeech", "pairs", "manifest")

# What `duet voice train --help` says DATA must look like (kept here, next to the readers).
DATA_HELP = (
    "a folder of recordings with their transcripts, in one of three layouts: (1) LJSpeech, as Piper's trainer "
    "reads it: metadata.csv with one 'id|text' or 'id|text|normalized' line per clip and the audio in wavs/<id>.wav; "
    "(2) pairs: NAME.wav next to NAME.txt holding its transcript (any folder depth); (3) a duet manifest.jsonl (or "
    "its folder). Audio: WAV, FLAC, OGG or MP3 at any rate, mono or stereo. At least 20 minutes of usable speech "
    "by default. The folder is only read, never changed")


@dataclass(frozen=True)
class Clip:
    """One clip as DATA lists it."""

    id: str  # unique, safe as a file name
    audio: Path | None  # None: no audio file for this transcript
    text: str | None  # None: no transcript for this audio
    where: str  # where DATA lists it, for the report: "metadata.csv:12", "a/b.wav"
    language: str = ""  # what a manifest line says ("" elsewhere)
    problem: str = ""  # a reason it cannot be used, found while reading DATA ("" = none yet)
    detail: str = ""


@dataclass(frozen=True)
class DataFolder:
    layout: str  # one of LAYOUTS
    root: Path
    clips: tuple[Clip, ...]


def read_data(data: str | Path) -> DataFolder:
    """The clips of DATA (module doc), or a one-line DuetError when DATA is none of the layouts."""
    path = Path(data)
    if not path.exists():
        raise DuetError(f"{path} does not exist")
    if path.is_file():
        if path.name == METADATA:
            return _ljspeech(path.parent)
        if path.suffix == ".jsonl":
            return _manifest(path)
        raise DuetError(f"{path} is a file: give the folder of recordings (or a metadata.csv or manifest.jsonl)")
    if (path / METADATA).is_file():
        return _ljspeech(path)
    if (path / MANIFEST).is_file():
        return _manifest(path / MANIFEST)
    folder = _pairs(path)
    if not folder.clips:
        raise DuetError(f"{path} holds no recordings: expected metadata.csv + wavs/ (LJSpeech), NAME.wav + NAME.txt "
                        "pairs, or a manifest.jsonl")
    return folder


_UNSAFE = re.compile(r"[^\w.\-]+", re.UNICODE)


def safe_id(name: str) -> str:
    """A clip name as a file name: path separators and other odd characters become ``_``."""
    return _UNSAFE.sub("_", name).strip("._") or "clip"


def _find_audio(folder: Path, stem: str) -> Path | None:
    for suffix in AUDIO_SUFFIXES:
        path = folder / f"{stem}{suffix}"
        if path.is_file():
            return path
    return None


def _ljspeech(root: Path) -> DataFolder:
    clips: list[Clip] = []
    listed: set[str] = set()
    with open(root / METADATA, encoding="utf-8", errors="replace", newline="") as f:
        for lineno, row in enumerate(csv.reader(f, delimiter="|", quoting=csv.QUOTE_NONE), 1):
            if not row or not "".join(row).strip():
                continue
            name = row[0].strip()
            text = row[2] if len(row) > 2 and row[2].strip() else (row[1] if len(row) > 1 else None)
            listed.add(name)
            clips.append(Clip(safe_id(name), _find_audio(root / "wavs", name), text, f"{METADATA}:{lineno}"))
    for path in sorted((root / "wavs").glob("*")) if (root / "wavs").is_dir() else ():
        if path.suffix.lower() in AUDIO_SUFFIXES and path.stem not in listed:  # audio no line names
            clips.append(Clip(safe_id(path.stem), path, None, str(path.relative_to(root))))
    return DataFolder("ljspeech", root, _unique(clips))


def _pairs(root: Path) -> DataFolder:
    clips: list[Clip] = []
    seen: set[Path] = set()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        suffix = path.suffix.lower()
        if suffix not in (*AUDIO_SUFFIXES, ".txt"):
            continue
        stem = path.with_suffix("")
        if stem in seen:
            continue
        seen.add(stem)
        audio = _find_audio(path.parent, path.stem)
        transcript = stem.with_suffix(".txt")
        text = " ".join(transcript.read_text(encoding="utf-8", errors="replace").split()) if transcript.is_file() \
            else None  # a transcript's line breaks are spaces
        rel = stem.relative_to(root)
        clips.append(Clip(safe_id(str(rel)), audio, text, str(audio.relative_to(root) if audio else
                                                               transcript.relative_to(root))))
    return DataFolder("pairs", root, _unique(clips))


def _manifest(path: Path) -> DataFolder:
    from duet.data.manifest import audio_path, read_manifest

    clips = []
    for lineno, u in enumerate(read_manifest(path), 1):
        audio = audio_path(path, u)
        clips.append(Clip(safe_id(u.id), audio if audio.is_file() else None, u.text, f"{path.name}:{lineno}",
                          language=u.language))
    return DataFolder("manifest", path.parent, _unique(clips))


def _unique(clips: list[Clip]) -> tuple[Clip, ...]:
    """Every id but the first of a repeated one is marked ``duplicate id`` (its audio may be another clip's)."""
    counts: Counter[str] = Counter()
    out = []
    for clip in clips:
        counts[clip.id] += 1
        if counts[clip.id] > 1:
            clip = replace(clip, id=f"{clip.id}~{counts[clip.id]}", problem="duplicate id",
                           detail=f"{clip.id} is listed before")
        out.append(clip)
    return tuple(out)
