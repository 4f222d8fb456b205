"""Speech metrics, a layer below ``duet.train`` (post-training scores its generations with them): WER/CER
(``wer``), Whisper ASR (``asr``), speaker similarity (``speaker``: Resemblyzer; ``speaker_wavlm``: WavLM x-vectors),
DNSMOS (``dnsmos``), PESQ-WB / STOI / MCD (``signal``), the metric models loaded on first use (``models``) and one
clip's score, the one result type every reader shares (``clip``). ``duet.eval`` (test sets, runs, reports, the
``duet eval`` command) sits on top of them.

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
    "ClipScore": "clip",
    "ClipScorer": "clip",
}

__all__ = [
    "ASRConfig",
    "AggregateRate",
    "ClipScore",
    "ClipScorer",
    "ErrorRate",
    "MCDConfig",
    "SpeakerConfig",
    "SpeakerEncoder",
    "Transcriber",
    "aggregate",
    "char_error",
    "cosine_similarity",
    "default_model_path",
    "mel_cepstral_distance",
    "mel_cepstrum",
    "normalize_text",
    "pesq_wb",
    "stoi",
    "word_error",
]

if TYPE_CHECKING:
    from duet.metrics.asr import ASRConfig, Transcriber, default_model_path
    from duet.metrics.clip import ClipScore, ClipScorer
    from duet.metrics.signal import MCDConfig, mel_cepstral_distance, mel_cepstrum, pesq_wb, stoi
    from duet.metrics.speaker import SpeakerConfig, SpeakerEncoder, cosine_similarity
    from duet.metrics.wer import AggregateRate, ErrorRate, aggregate, char_error, normalize_text, word_error


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'duet.metrics' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"duet.metrics.{_EXPORTS[name]}"), name)
    globals()[name] = value  # cache: __getattr__ runs once per name
    return value
