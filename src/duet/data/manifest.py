"""The corpus manifest (`DIR/manifest.jsonl`) and the text-keyed train/val/test split.

One JSON object per line, one line per utterance::

    {"id": ..., "text": ..., "language": ..., "speaker": ..., "path": "wavs/<speaker>/<id>.wav",
     "duration": 3.52, "source": "festival", "split": "train", "text_source": "fortunes"}

`path` is relative to the manifest's directory; `duration` is in seconds, measured from the written audio file;
`text_source` names the text collection a synthesised sentence was drawn from (empty for recordings and for
manifests written before it existed). Expressive readings (``duet.data.expressive``) add two fields, written only
when set, so other manifests are unchanged: `emotion` (the speaking style, an emotion token's name) and `events`
(each inline non-verbal event of the text as `[name, start_s, end_s]`, in text order; the text holds their tags,
``"Well [laughter] I never."``).

Splits are made by sentence, not by utterance: every utterance whose normalised text is the same lands in the same
split, so a test sentence is never heard in training, whichever speakers read it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from duet.errors import DuetError

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class Utterance:
    id: str
    text: str
    language: str  # espeak-style tag: en, es, pt-br, nl, ky, fr
    speaker: str
    path: str  # relative to the corpus directory
    duration: float  # seconds, measured from the written audio
    source: str  # festival | espeak | flite | piper | asterisk | pocketsphinx
    split: str  # train | val | test
    text_source: str = ""  # where a synthesised text came from: fortunes, templates, words, tdavid, web, ...
    emotion: str = ""  # expressive readings: the speaking style (duet.text.tokens.EMOTIONS)
    events: tuple[tuple[str, float, float], ...] = ()  # expressive readings: (event, start_s, end_s) per tag

    def __post_init__(self) -> None:
        if not isinstance(self.events, tuple) or (self.events and not isinstance(self.events[0], tuple)):  # JSON
            object.__setattr__(self, "events", tuple((str(n), float(a), float(b)) for n, a, b in self.events))


_WRITTEN_WHEN_SET = ("emotion", "events")  # absent from a line when empty, as in manifests before them


def _row(utt: Utterance) -> dict:
    row = asdict(utt)
    for key in _WRITTEN_WHEN_SET:
        if not row[key]:
            del row[key]
    if "events" in row:
        row["events"] = [[n, round(a, 4), round(b, 4)] for n, a, b in row["events"]]
    return row


_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)


def split_key(text: str) -> str:
    """The text identity used for splitting: NFKC, case-folded, punctuation and spacing dropped.

    Deliberately local and frozen (not `duet.text.normalize`): changing it would silently move sentences between
    splits of an existing corpus.
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    return _NON_WORD.sub(" ", text).strip()


def assign_split(text: str, seed: int, val_fraction: float, test_fraction: float) -> str:
    """train / val / test from a hash of (seed, normalised text); the speaker plays no part."""
    if not (0.0 <= val_fraction and 0.0 <= test_fraction and val_fraction + test_fraction < 1.0):
        raise DuetError(f"val/test fractions must be >= 0 and sum below 1, got {val_fraction}, {test_fraction}")
    digest = hashlib.sha256(f"{seed}\x00{split_key(text)}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64  # uniform in [0, 1)
    if u < test_fraction:
        return "test"
    if u < test_fraction + val_fraction:
        return "val"
    return "train"


def write_manifest(path: str | Path, utterances: Iterable[Utterance]) -> Path:
    """Write JSONL atomically (temp file + rename), so a reader never sees half a manifest."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for utt in utterances:
            f.write(json.dumps(_row(utt), ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    return path


def read_manifest(path: str | Path) -> list[Utterance]:
    path = Path(path)
    if not path.is_file():
        raise DuetError(f"manifest not found: {path}")
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(Utterance(**json.loads(line)))
            except (json.JSONDecodeError, TypeError) as err:
                raise DuetError(f"{path}:{lineno}: not a manifest line ({err})") from err
    return out


def audio_path(manifest_path: str | Path, utt: Utterance) -> Path:
    """Absolute path of an utterance's audio (manifest paths are relative to the manifest's directory)."""
    return Path(manifest_path).resolve().parent / utt.path
