"""Evaluation metrics: WER/CER (``wer``), Whisper ASR (``asr``), speaker similarity (``speaker``),
PESQ-WB / STOI / MCD (``signal``), and WER over a manifest (``manifest_wer``).

Names are resolved lazily (PEP 562): ``duet eval`` is registered on every CLI start, and importing
this package must not pull in scipy and soundfile just to print ``duet --help``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "ErrorRate": "wer",
    "AggregateRate": "wer",
    "normalize_text": "wer",
    "word_error": "wer",
    "char_error": "wer",
    "aggregate": "wer",
    "ASRConfig": "asr",
    "Transcriber": "asr",
    "default_model_path": "asr",
    "SpeakerConfig": "speaker",
    "SpeakerEncoder": "speaker",
    "cosine_similarity": "speaker",
    "MCDConfig": "signal",
    "pesq_wb": "signal",
    "stoi": "signal",
    "mel_cepstrum": "signal",
    "mel_cepstral_distance": "signal",
    "ManifestWER": "manifest_wer",
    "evaluate_manifest": "manifest_wer",
}

__all__ = [
    "ASRConfig",
    "AggregateRate",
    "ErrorRate",
    "MCDConfig",
    "ManifestWER",
    "SpeakerConfig",
    "SpeakerEncoder",
    "Transcriber",
    "aggregate",
    "char_error",
    "cosine_similarity",
    "default_model_path",
    "evaluate_manifest",
    "mel_cepstral_distance",
    "mel_cepstrum",
    "normalize_text",
    "pesq_wb",
    "stoi",
    "word_error",
]

if TYPE_CHECKING:
    from duet.eval.asr import ASRConfig, Transcriber, default_model_path
    from duet.eval.manifest_wer import ManifestWER, evaluate_manifest
    from duet.eval.signal import MCDConfig, mel_cepstral_distance, mel_cepstrum, pesq_wb, stoi
    from duet.eval.speaker import SpeakerConfig, SpeakerEncoder, cosine_similarity
    from duet.eval.wer import AggregateRate, ErrorRate, aggregate, char_error, normalize_text, word_error


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'duet.eval' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"duet.eval.{_EXPORTS[name]}"), name)
    globals()[name] = value  # cache: __getattr__ runs once per name
    return value
