"""DATA -> a checked, prepared, aligned corpus of the build directory: what ``duet voice check`` reports and ``duet
voice train`` trains on.

Every clip of DATA (``duet.voice.sources``) goes through the checks in order; the first that fails is its reason in
the report (``duet.voice.report``) and the others go on:

1. reading DATA: missing audio, duplicate id, another language, missing or empty transcript;
2. audio (``duet.voice.checks``): unreadable, clipped, mostly silence; then prepared (``duet.voice.prepare``: mono,
   trimmed, loudness-normalised, at the codec's rate) and too short or too long;
3. text: normalised as the model reads it (``duet.text.prompts.prepare_input``), unspeakable text, then phonemised
   by the language's espeak-ng voice (one run for all clips);
4. forced alignment (``duet.voice.align``): poor alignment; the others get their timing sidecar.

The usable clips are split by text (``duet.data.manifest.assign_split``: one sentence never in two splits): a
held-out ``test_fraction`` for the final scores, a ``val_fraction`` for the validation loss that picks the best
weights, the rest for training. Too little usable audio (the usable clips of all splits, as recorded) is refused in
one line after the report is written (``finish_corpus``); otherwise the manifest is written last, atomically, and
marks the stage done.

Layout under ``corpus_dir``: ``wavs/<clip>.wav`` + ``wavs/<clip>.timing.json`` (prepared audio and its timing),
``manifest.jsonl`` (``duet.data.manifest``; speaker ``voice``, source ``recording``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from duet.data.manifest import Utterance, assign_split, write_manifest
from duet.errors import DuetError
from duet.voice.align import AlignChecks, AlignedClip, AlignInput, align_clips, clip_timing, timing_problem
from duet.voice.checks import (
    ClipChecks,
    analyse,
    audio_problem,
    foreign_scripts,
    length_problem,
    phonemes_problem,
    speakable_problem,
    transcript_problem,
)
from duet.voice.language import espeak_voice, whisper_language
from duet.voice.prepare import PrepConfig, prepare_audio, read_recording
from duet.voice.report import Rejection, write_report
from duet.voice.sources import Clip, DataFolder

MANIFEST = "manifest.jsonl"
SPEAKER = "voice"


@dataclass(frozen=True)
class VoiceDataConfig:
    language: str = "en"  # espeak-ng's name (duet.voice.language)
    min_minutes: float = 20.0  # usable recordings (all splits, as recorded) a voice needs
    test_fraction: float = 0.1  # held out for the final WER and similarity
    val_fraction: float = 0.04  # held out for the validation loss (best weights, early stopping)
    seed: int = 0  # the split's
    checks: ClipChecks = field(default_factory=ClipChecks)
    prep: PrepConfig = field(default_factory=PrepConfig)
    align: AlignChecks = field(default_factory=AlignChecks)

    def __post_init__(self) -> None:
        if not (0 < self.test_fraction and 0 <= self.val_fraction and self.test_fraction + self.val_fraction < 0.5):
            raise DuetError(f"the held-out share must be above 0 and, with validation, below half the data; got "
                            f"{self.test_fraction} + {self.val_fraction}")
        if self.min_minutes < 0:
            raise DuetError(f"the minimum of usable speech must be >= 0 minutes, got {self.min_minutes}")


@dataclass(frozen=True)
class VoiceCorpus:
    manifest: Path  # where finish_corpus writes it
    found: int  # clips DATA lists
    rejections: tuple[Rejection, ...]
    entries: tuple[Utterance, ...]  # the usable clips, split
    ipa: tuple[str, ...]  # every usable clip's phonemes (what the model reads)
    recorded_seconds: float  # the usable clips as recorded, before trimming: what min_minutes counts

    @property
    def usable_seconds(self) -> float:
        """The usable clips as trained on (trimmed)."""
        return sum(e.duration for e in self.entries)

    def seconds(self, split: str) -> float:
        return sum(e.duration for e in self.entries if e.split == split)

    def clips(self, split: str) -> int:
        return sum(e.split == split for e in self.entries)


@dataclass
class _Candidate:
    clip: Clip
    seconds: float  # prepared (trimmed)
    recorded: float  # seconds as recorded
    speech: float  # seconds from the first speech frame to the last
    feats: np.ndarray  # (T, D)
    text: str = ""  # as the model reads it
    ipa: str = ""


def build_voice_corpus(folder: DataFolder, corpus_dir: Path, cfg: VoiceDataConfig, tokenizer, sample_rate: int,
                       frame_rate: float, progress: bool = True) -> VoiceCorpus:
    """Check, prepare and align every clip of ``folder`` into ``corpus_dir`` (module doc). ``tokenizer``: the base
    model's, marked for the language (``duet.voice.language``); ``sample_rate`` and ``frame_rate``: the codec's."""
    from tqdm import tqdm

    from duet.audio import save_audio
    from duet.data.align_corpus import frame_features
    from duet.text.prompts import prepare_input

    rejected: list[Rejection] = []

    def reject(clip: Clip, problem: tuple[str, str]) -> None:
        rejected.append(Rejection(clip.id, problem[0], problem[1], clip.where))

    hop = round(sample_rate / frame_rate)
    candidates: list[_Candidate] = []
    for clip in tqdm(folder.clips, desc="check audio", unit="clip", disable=not progress):
        problem = _listing_problem(clip, cfg.language)
        if problem is None:
            recording = read_recording(clip.audio)
            if isinstance(recording, str):
                problem = ("unreadable", recording)
            else:
                audio, rate = recording
                facts = analyse(audio, rate, cfg.checks)
                problem = audio_problem(facts, cfg.checks)
        if problem is not None:
            reject(clip, problem)
            continue
        prepared = prepare_audio(audio, rate, facts, sample_rate, cfg.prep)
        seconds = len(prepared) / sample_rate
        problem = length_problem(seconds, cfg.checks)
        if problem is not None:
            reject(clip, problem)
            continue
        save_audio(corpus_dir / "wavs" / f"{clip.id}.wav", prepared, sample_rate)
        frames = math.ceil(len(prepared) / hop)  # the codec's count: a partly filled last frame counts
        candidates.append(_Candidate(clip, seconds, facts.seconds, facts.speech_end - facts.speech_start,
                                     frame_features(prepared, sample_rate, frame_rate, frames)))

    candidates = _speakable(candidates, cfg, prepare_input, reject)
    aligned = align_clips([AlignInput(c.clip.id, c.ipa, c.feats, c.speech) for c in candidates], tokenizer,
                          frame_rate, cfg.align, progress=progress)
    usable = _timed(candidates, aligned, corpus_dir, frame_rate, cfg.language, reject)

    entries = [Utterance(c.clip.id, c.clip.text.strip(), cfg.language, SPEAKER, f"wavs/{c.clip.id}.wav",
                         round(c.seconds, 4), "recording",
                         assign_split(c.text, cfg.seed, cfg.val_fraction, cfg.test_fraction)) for c in usable]
    return VoiceCorpus(corpus_dir / MANIFEST, len(folder.clips), tuple(rejected),
                       tuple(sorted(entries, key=lambda e: e.id)), tuple(c.ipa for c in usable),
                       sum(c.recorded for c in usable))


def finish_corpus(corpus: VoiceCorpus, cfg: VoiceDataConfig, report: Path) -> Path:
    """Write the report; refuse, in one line, less usable speech than ``cfg.min_minutes``; else write the manifest
    (last: it marks the stage done). -> the manifest."""
    write_report(report, corpus.rejections)
    have = corpus.recorded_seconds / 60
    if have < cfg.min_minutes or not corpus.entries:
        raise DuetError(f"{have:.1f} minutes of usable recordings in {len(corpus.entries)} of {corpus.found} clips; "
                        f"a voice needs at least {cfg.min_minutes:g} minutes (why {len(corpus.rejections)} clips were "
                        f"left out: {report})")
    return write_manifest(corpus.manifest, corpus.entries)


def _listing_problem(clip: Clip, language: str) -> tuple[str, str] | None:
    """What reading DATA already shows is wrong with ``clip`` (``duet.voice.sources``), else None."""
    if clip.problem:
        return clip.problem, clip.detail
    if clip.language and whisper_language(clip.language) != whisper_language(language):
        return "other language", f"the manifest says {clip.language}, the voice is {language}"
    if clip.audio is None:
        return "missing audio", "no audio file for this transcript"
    return transcript_problem(clip.text)


def _speakable(candidates: list[_Candidate], cfg: VoiceDataConfig, prepare_input, reject) -> list[_Candidate]:
    """The candidates whose text espeak-ng can speak, with their prepared text and IPA."""
    from duet.text.phonemes import phonemize_many

    for c in candidates:
        c.text = prepare_input(c.clip.text, cfg.language)
    scripts = foreign_scripts(c.text for c in candidates)
    kept = []
    for c in candidates:
        problem = speakable_problem(c.text, scripts)
        if problem is not None:
            reject(c.clip, problem)
        else:
            kept.append(c)
    for c, ipa in zip(kept, phonemize_many([c.text for c in kept], espeak_voice(cfg.language)), strict=True):
        c.ipa = ipa
    out = []
    for c in kept:
        problem = phonemes_problem(c.ipa)
        if problem is not None:
            reject(c.clip, problem)
        else:
            out.append(c)
    return out


def _timed(candidates: list[_Candidate], aligned: dict[str, AlignedClip | tuple[str, str]], corpus_dir: Path,
           frame_rate: float, language: str, reject) -> list[_Candidate]:
    """Write the timing sidecar of every well-aligned candidate; -> those candidates."""
    from duet.data.timing import text_words, write_timing
    from duet.text.phonemes import phonemize_many

    words = {c.clip.id: text_words(c.text) for c in candidates}
    vocab = sorted({w for ws in words.values() for w in ws})
    word_ipa = dict(zip(vocab, phonemize_many(vocab, espeak_voice(language)), strict=True))
    out = []
    for c in candidates:
        result = aligned[c.clip.id]
        if isinstance(result, tuple):
            reject(c.clip, result)
            continue
        ws = words[c.clip.id]
        timing = clip_timing(c.ipa, result, frame_rate, ws, [word_ipa[w] for w in ws])
        problem = timing_problem(timing, c.seconds)
        if problem is not None:
            reject(c.clip, problem)
            continue
        write_timing(corpus_dir / "wavs" / f"{c.clip.id}.wav", timing)
        out.append(c)
    return out
