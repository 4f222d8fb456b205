"""A voice's language: the espeak-ng voice that phonemises its text, the language Whisper hears it in, and the base
model's tokenizer marked for that espeak-ng voice.

gepard-tiny reads espeak-ng IPA through a byte-level BPE trained on English IPA (``duet.text.phonemes``; 256 bytes +
64 merges). Any language espeak-ng phonemises goes through the same door: its text is phonemised by its own espeak-ng
voice, and the base model's tokenizer is re-marked with that voice. The BPE and its ids stay as they are, so the
shipped weights still fit, and nothing is unknown: a symbol English IPA never uses (Spanish ``ɾ β ɣ ʝ``) has no
token of its own and is encoded as its UTF-8 bytes, byte tokens whose embedding rows the fine-tuning trains. The aligner and the timing sidecars cut the IPA with the same
BPE, so a symbol split into two byte tokens shares its time span between them (``duet.data.token_timing``).

Language names are espeak-ng's: ``en`` (read as ``en-us``, gepard-tiny's own voice), ``es`` (Spain), ``es-419``
(Latin America), ``fr``, ``de``, ... (``espeak-ng --voices``). What a language adds to the base model's symbols is
counted for the voice's card (:func:`new_symbols`). The manifest keeps the name as given; English text is
normalised first (numbers and abbreviations written out, ``duet.text.prompts.prepare_input``), other languages are
read as written: espeak-ng reads their numbers itself.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from duet.data.build import link_or_copy
from duet.errors import DuetError
from duet.text.phonemes import DEFAULT_VOICE, MARK, marked_voice

MODEL_FILES = ("config.json", "model.safetensors")  # copied beside the re-marked tokenizer.json


def espeak_voice(language: str) -> str:
    """The espeak-ng voice that reads ``language``: ``en`` is gepard-tiny's own ``en-us``, any other name as given."""
    return DEFAULT_VOICE if language == "en" else language


def whisper_language(language: str) -> str:
    """The language code Whisper transcribes ``language`` in: ``es-419`` -> ``es``, ``en-us`` -> ``en``."""
    return language.split("-")[0].lower()


def check_language(language: str) -> str:
    """The espeak-ng voice of ``language``, or a one-line DuetError when espeak-ng has none."""
    from duet.text.phonemes import phonemize

    voice = espeak_voice(language)
    phonemize("a", voice)  # espeak-ng refuses an unknown voice in one line (duet.text.phonemes)
    return voice


def base_voice(base_dir: Path) -> str:
    """The espeak-ng voice a base model reads (its tokenizer's marker), or a one-line DuetError for a model that
    does not read phonemes."""
    voice = marked_voice(json.loads((Path(base_dir) / "tokenizer.json").read_text(encoding="utf-8")))
    if voice is None:
        raise DuetError(f"{base_dir} does not read phonemes (its tokenizer has no espeak-ng voice); a voice is trained "
                        "from a model with a phoneme tokenizer and aligned text input, such as gepard-tiny")
    return voice


def base_for_language(base_dir: Path, voice: str, out_dir: Path) -> Path:
    """The base model directory to warm-start from for ``voice``: ``base_dir`` itself when its tokenizer is marked
    with ``voice``, else a copy in ``out_dir`` whose tokenizer is marked with it (weights and config unchanged)."""
    if base_voice(base_dir) == voice:
        return base_dir
    tokenizer = json.loads((base_dir / "tokenizer.json").read_text(encoding="utf-8"))
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in MODEL_FILES:
        link_or_copy(base_dir / name, out_dir / name)
    if not _remark(tokenizer, voice):
        raise DuetError(f"{base_dir}/tokenizer.json: cannot find its espeak-ng voice marker")
    tmp = out_dir / "tokenizer.json.tmp"
    tmp.write_text(json.dumps(tokenizer, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, out_dir / "tokenizer.json")
    return out_dir


def _remark(node: object, voice: str) -> bool:
    """Point the marker ``Replace(MARK + voice, "")`` of a parsed tokenizer.json's normaliser at ``voice``."""
    if isinstance(node, dict):
        pattern = node.get("pattern")
        if node.get("type") == "Replace" and isinstance(pattern, dict) and str(pattern.get("String", "")).startswith(
                MARK):
            pattern["String"] = MARK + voice
            return True
        return any(_remark(v, voice) for v in node.values())
    if isinstance(node, list):
        return any(_remark(v, voice) for v in node)
    return False


# "The North Wind and the Sun", the passage phoneticians read to show a language's sounds: what a base voice's reading
# of it holds is what the base model has read; a symbol outside it is new to the model.
REFERENCE_PASSAGE = (
    "The North Wind and the Sun were disputing which was the stronger, when a traveler came along wrapped in a warm "
    "cloak. They agreed that the one who first succeeded in making the traveler take his cloak off should be "
    "considered stronger than the other. Then the North Wind blew as hard as he could, but the more he blew the more "
    "closely did the traveler fold his cloak around him; and at last the North Wind gave up the attempt. Then the Sun "
    "shined out warmly, and immediately the traveler took off his cloak. And so the North Wind was obliged to confess "
    "that the Sun was the stronger of the two.")


def new_symbols(tokenizer, ipa_texts: Iterable[str], base_voice: str) -> dict[str, dict[str, int]]:
    """IPA sounds of ``ipa_texts`` (punctuation and stress marks aside) that ``base_voice`` (the base model's own
    espeak-ng voice) does not use in its reading of :data:`REFERENCE_PASSAGE`, most frequent first: symbol -> {"count", "tokens"} (how many BPE tokens the
    symbol takes: 1 for an ASCII letter, 2 for a symbol read as its UTF-8 bytes)."""
    from duet.data.timing import is_speech
    from duet.text.phonemes import phonemize

    known = set(phonemize(REFERENCE_PASSAGE, base_voice))
    backend = tokenizer.backend_tokenizer
    counts = Counter(ch for text in ipa_texts for ch in text if is_speech(ch) and ch not in known)
    return {ch: {"count": n, "tokens": len(backend.encode(ch, add_special_tokens=False).ids)}
            for ch, n in sorted(counts.items(), key=lambda kv: -kv[1])}
