"""Gepard's runtime: prefill each request once, then one batched KV-cached decode step per frame, for ``duet speak``
and ``duet serve`` alike (``duet.tts.runtime``).

Gepard's decode loop is a stock transformer step (DESIGN §A, "Principle"), so continuous batching is the usual
LLM kind: requests of different lengths decode together in one forward pass per step. Caches live in one pool
(``duet.nn.kv_pool``): each cached sequence (a *row*) owns a slot and its positions [0, L) in it. A request has one
row, or two with classifier-free guidance (conditional, then the unconditional prompt [SOT, EOT, SOS] of
``GepardPrompt.unconditional``, as ``duet.gepard.generate`` runs it). Each step

1. guides every running request's pending logits (``uncond + w (cond - uncond)``; w = 1 reads the conditional row
   alone), samples its frame with its own parameters and generator (``duet.gepard.sampling``) and reads its stop
   probability from the conditional row (sigmoid of the stop head; Gepard §3.3);
2. feeds the frames of the requests that go on through Gepard's decode step (``duet.gepard.decode.GepardStep``,
   the layout ``GepardModel.prefill`` / ``step`` read, in plain torch) as one batch of rows: each row's new key and
   value are written into the pool at its own length and attention reads the pool rows in place (right-padded to
   the longest, masked), with per-row positions for RoPE.

So a step costs a fixed number of tensor ops whatever the batch size. A request whose stop probability exceeds its
threshold is not fed (its caller drops that step's phantom frame), so a row never holds more than
``prompt + bound`` positions. Frames come from Gepard's one sampler (``duet.gepard.sampling``), the one
``duet.gepard.generate`` and the vLLM path use, so a seed gives the same frames offline, spoken and served.

Aligned text input (``duet.gepard.aligned``): prefill lays the text out as the model's own ``prefill`` does (its
duration predictor, at the request's ``speed``: ``GepardModel.prompt_inputs``) and each row keeps its layout and
next audio position (an ``AlignedState``: its aligned inputs computed a block of positions at a time). Such a model
knows how long a text will be: one predicted to end within ``margin_frames`` of its bound is refused. Its layout
(the conditional row's durations: output frame f is laid out at audio position f) goes out with every step of the
request as a ``TextLayout`` (``duet.tts.timestamps``: word timings), when the runtime has the tokenizer. A request's
SSML pauses and rates (``SynthesisRequest.pace``) change the predicted durations before prefill
(``duet.tts.pace_layout``), and its frame bound grows with them.

Voice cloning (a model with the voice compressor, ``GepardConfig.voice``; Gepard §2.6). A request's ``reference``
(mono float32 at the codec's rate) is encoded by the codec once, unfolded to channel digits, cut to the
compressor's ``max_reference_frames`` (its first frames), and compressed to K prefix vectors
(``duet.gepard.voice.reference_prefix``); a request without one reads ``null_prefix``. The prefix enters prefill
only: each row's cache starts with its K positions, then the text, so the decode steps are unchanged. No transcript
is needed. The prefix of the last few reference arrays is kept (by identity), so the pieces of one ``duet speak``
utterance encode their shared clip once. The unconditional CFG row keeps the prefix (it drops the text only). The
vLLM path computes the same prefix in its client (``duet.serve.vllm.voice``).

Divergence, named: the cache budget reserves one row per request, so a request guided where the model's default
is not (``cfg_scale`` != 1) holds twice what it reserved.

Shape legend: B running requests, R rows (a request's one or two), S prompt ids, K prefix vectors, C channels (32),
G packed groups (8), D width, H_kv key/value heads, hd head_dim, L cached positions, P reference frames.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from duet.codecs.base import Codec
from duet.codecs.fsq import FSQConfig, GroupFSQ
from duet.errors import DuetError, InvalidRequest
from duet.gepard.aligned import AlignedState
from duet.gepard.decode import GepardStep, frame_inputs
from duet.gepard.generate import SPEAK_SAMPLING, guide
from duet.gepard.heads import pad_channels
from duet.gepard.model import NUM_SERVICE_TOKENS, GepardModel, GepardPrompt
from duet.gepard.sampling import sample_requests
from duet.gepard.voice import reference_prefix
from duet.nn.kv_pool import KVPool
from duet.sampling import FrameBound, SamplingParams
from duet.tts.pace_layout import paced_durations
from duet.tts.request import SynthesisRequest
from duet.tts.runtime import FamilyTraits, PerRequest, StepCost, StepOutput, kv_cache_bytes, restoring_generators
from duet.tts.timestamps import TextLayout


@dataclass(frozen=True)
class GepardRuntimeConfig:
    bound: FrameBound = FrameBound()  # length bound from the text
    # request defaults: cooled and truncated (SPEAK_SAMPLING), or the model's own (its config.json)
    params: SamplingParams = SPEAK_SAMPLING


def check_predicted_length(frames: float, max_frames: int, frame_rate: float, margin_frames: int = 0) -> None:
    """An aligned model knows how long a text will be: refuse one that would not end ``margin_frames`` before the
    bound (sampled speech runs a little longer or shorter than predicted; past the bound it would be cut)."""
    if frames + margin_frames > max_frames:
        room = (max_frames - margin_frames) / frame_rate
        raise InvalidRequest(f"this text needs about {frames / frame_rate:.1f} s of speech; one request holds "
                             f"{room:.1f} s (and {margin_frames / frame_rate:.1f} s of margin); split it into shorter "
                             "requests", param="input", code="context_length_exceeded")


def check_reference(reference: np.ndarray, samples_per_frame: int) -> None:
    """A reference clip the codec can encode: 1-D, finite, at least one frame (``samples_per_frame``) long. Shared
    by this runtime and the vLLM path (``duet.serve.vllm.engine``)."""
    if not isinstance(reference, np.ndarray) or reference.ndim != 1:
        raise InvalidRequest("the reference clip must be mono samples (a 1-D array)", param="reference_audio")
    if not np.all(np.isfinite(reference)):
        raise InvalidRequest("the reference clip has NaN or infinite samples", param="reference_audio")
    if reference.shape[0] < samples_per_frame:
        raise InvalidRequest(f"the reference clip has {reference.shape[0]} samples, shorter than one codec frame "
                             f"({samples_per_frame})", param="reference_audio")


@dataclass(eq=False)
class _Row:
    """One cached sequence in the pool: a request's conditional or unconditional prompt and its frames."""

    slot: int
    length: int  # cached positions L
    next_codes: torch.Tensor  # (216,) logits of the next frame
    next_stop: torch.Tensor  # () stop logit of the next frame
    aligned: AlignedState | None = None  # aligned text input: this row's text, durations and next position


@dataclass(eq=False)
class GepardState:
    request: SynthesisRequest
    generator: torch.Generator
    rows: list[_Row]  # conditional, then unconditional when guiding
    cfg_scale: float = 1.0
    layout: TextLayout | None = None  # aligned models: the text over the frames, on every output


@dataclass(eq=False)
class GepardRuntime:
    """Implements ``duet.tts.runtime.FamilyRuntime`` for a :class:`GepardModel` and a packed-token codec.
    ``encode`` turns a text into its prompt ids [SOT, text ids, EOT, SOS] (``duet.text.prompts.gepard_prompt``)
    with ``tokenizer`` in ``language``; without the tokenizer an aligned model's layout stays unknown (no word
    timings)."""

    model: GepardModel
    codec: Codec
    encode: Callable[[str], list[int]]
    name: str = "gepard"
    config: GepardRuntimeConfig = GepardRuntimeConfig()
    fsq: GroupFSQ = field(default_factory=lambda: GroupFSQ(FSQConfig()))
    tokenizer: Any = None
    language: str = "en"

    def __post_init__(self) -> None:
        mcfg = self.model.config
        if tuple(self.fsq.config.channel_levels) != tuple(mcfg.channel_levels):
            raise DuetError("the FSQ packing does not match the model's channel levels")
        if len(self.codec.codebook_sizes) != self.fsq.config.num_groups:
            raise DuetError(f"{self.name} needs a packed-FSQ codec of {self.fsq.config.num_groups} code streams; the "
                            f"codec has {len(self.codec.codebook_sizes)}")
        self.model.eval()
        no_speed = None if self.model.is_aligned else ("it has no duration predictor (no aligned text input): it "
                                                       "decodes until it stops, so there is no length to scale")
        self.traits = FamilyTraits(speed=no_speed, nucleus=True, clone_from_audio=self.model.has_voice,
                                   clone_from_audio_note=": it has no voice compressor (train one with duet train "
                                                         "gepard --voice-prefix)",
                                   timings=self.model.is_aligned and self.tokenizer is not None)
        bb = mcfg.backbone
        self._dtype = self.model.embed_tokens.weight.dtype
        self._device = self.model.embed_tokens.weight.device
        self.pool = KVPool(bb.num_layers, bb.num_kv_heads, bb.head_dim, self._dtype, self._device)
        self._step = GepardStep(self.model)
        self.cache_bytes_per_position = kv_cache_bytes(bb.num_layers, bb.num_kv_heads, bb.head_dim, self._dtype)
        self._levels = tuple(mcfg.channel_levels)
        self._ids: PerRequest[list[int]] = PerRequest()
        self._paces: PerRequest[torch.Tensor] = PerRequest()
        self._prefixes: OrderedDict[int, tuple[np.ndarray, torch.Tensor]] = OrderedDict()  # id(reference) -> prefix

    @property
    def max_frames(self) -> int:
        return self.config.bound.max_frames

    @property
    def default_params(self) -> SamplingParams:
        return self.config.params

    # --- admission-time questions (any thread) ----------------------------------------------------------------------

    def check(self, request: SynthesisRequest) -> None:
        if self._cfg_scale(request) != 1.0 and not self.model.has_unconditional_path:
            raise InvalidRequest(f"{self.name} has no unconditional path for classifier-free guidance (train it "
                                 "with duet train gepard --voice-prefix, or --text-dropout 0.1)", param="cfg_scale")
        if request.reference is not None:
            check_reference(request.reference, self.codec.samples_per_frame)
        limit = self.model.config.backbone.max_positions
        prompt = self.prompt_positions(request)
        if prompt >= limit:  # before the duration model, whose cost grows with the square of the text
            raise InvalidRequest(f"the text takes {prompt} positions, the model has {limit}; split it into shorter "
                                 "requests", param="input", code="context_length_exceeded")
        if self.model.is_aligned and request.params.max_frames is None:  # it knows how long the text will be
            frames = float(self._durations(request).sum())
            check_predicted_length(frames, self.frame_bound(request), self.codec.frame_rate,
                                   self.config.bound.margin_frames)
        need = prompt + (request.params.max_frames or self.frame_bound(request))
        if need > limit:
            raise InvalidRequest(f"prompt + frames = {need} positions exceeds the model's {limit}", param="input",
                                 code="context_length_exceeded")

    def frame_bound(self, request: SynthesisRequest) -> int:
        bound = self.config.bound
        frames = bound.frames(len(self._text_ids(request)) - NUM_SERVICE_TOKENS)
        pace = request.pace
        if pace is not None and pace.layout:  # slower spans and pauses make the text longer
            extra = math.ceil(frames / min(pace.slowest, 1.0)) - frames
            frames = min(bound.max_frames, frames + extra + math.ceil(pace.break_seconds * self.codec.frame_rate))
        return frames

    def prompt_positions(self, request: SynthesisRequest) -> int:
        return self.model.config.num_prefix + len(self._text_ids(request))  # [prefix | text ending in SOS]

    def step_cost(self, request: SynthesisRequest, frames: int) -> StepCost:
        return StepCost(frames, 1 if self._cfg_scale(request) == 1.0 else 2)  # one frame per step, a position a row

    def _text_ids(self, request: SynthesisRequest) -> list[int]:
        return self._ids.get(request, lambda r: self.encode(r.text))

    def _prompt_ids(self, request: SynthesisRequest) -> torch.Tensor:
        return torch.tensor([self._text_ids(request)], dtype=torch.long, device=self._device)  # (1, S)

    def _durations(self, request: SynthesisRequest) -> torch.Tensor:
        """An aligned model's frames per wrapped token (1, S) at the request's speed, with its SSML pace."""
        ids = self._prompt_ids(request)
        if request.pace is not None and request.pace.layout:
            return self._paces.get(request, self._paced)
        return self.model.duration.predict(ids, torch.tensor([ids.shape[1]], device=self._device), request.speed)

    def _paced(self, request: SynthesisRequest) -> torch.Tensor:
        ids = self._prompt_ids(request)
        predicted = self.model.duration.predict(ids, torch.tensor([ids.shape[1]], device=self._device), request.speed)
        paced = paced_durations(predicted[0].tolist(), ids[0].tolist(), request.text, request.pace, self.tokenizer,
                                self.codec.frame_rate, self.language)
        return torch.tensor([paced], device=self._device)  # (1, S)

    def _cfg_scale(self, request: SynthesisRequest) -> float:
        return 1.0 if request.params.cfg_scale is None else request.params.cfg_scale

    # --- the decode thread ------------------------------------------------------------------------------------------

    @torch.inference_mode()
    def prefill(self, requests: Sequence[SynthesisRequest], seeds: Sequence[int]) -> list[GepardState]:
        states = []
        for request, seed in zip(requests, seeds):  # one by one: prompts differ in length, and prefill is once
            paced = self._durations(request) if request.pace is not None and request.pace.layout else None
            prompt = GepardPrompt(self._prompt_ids(request), prefix=self._prefix(request), durations=paced,
                                  speed=request.speed)
            bound = request.params.max_frames or self.frame_bound(request)
            w = self._cfg_scale(request)
            prompts = [prompt] if w == 1.0 else [prompt, self.model.unconditional(prompt)]
            rows = [self._prefill_row(p, bound) for p in prompts]
            generator = torch.Generator(device=self._device).manual_seed(seed)
            states.append(GepardState(request, generator, rows, w, self._layout(request, rows[0])))
        return states

    def _layout(self, request: SynthesisRequest, row: _Row) -> TextLayout | None:
        """The conditional row's durations over the prompt ids, the ones its aligned input follows."""
        if row.aligned is None or self.tokenizer is None:
            return None
        durations = row.aligned.durations[0].tolist()  # (S,)
        return TextLayout(request.text, tuple(self._text_ids(request)), tuple(durations), self.tokenizer,
                          self.language)

    def _prefix(self, request: SynthesisRequest) -> torch.Tensor | None:
        """The request's prefix (1, K, D): its reference compressed, or ``null_prefix``; None for a model without
        the voice compressor. Kept for the last few reference arrays (module docstring)."""
        if not self.model.has_voice:
            return None
        if request.reference is None:
            return self.model.voice_prefix(batch_size=1)
        key = id(request.reference)
        kept = self._prefixes.get(key)
        if kept is not None and kept[0] is request.reference:
            self._prefixes.move_to_end(key)
            return kept[1]
        prefix = reference_prefix(self.model, self.codec, request.reference, self.fsq)  # (1, K, D)
        self._prefixes[key] = (request.reference, prefix)
        while len(self._prefixes) > 8:
            self._prefixes.popitem(last=False)
        return prefix

    def _prefill_row(self, prompt: GepardPrompt, bound: int) -> _Row:
        """A prompt into a fresh pool row with room for ``bound`` frames: the layout of ``GepardModel.prefill``
        (``prompt_inputs``), run by the decode step's own prefill."""
        inputs, aligned = self.model.prompt_inputs(prompt)  # (1, K + S, D): the prefix (if any) and the text
        s = inputs.shape[1]
        slot = self.pool.alloc(s + bound)
        logits = self._step.prefill(inputs, self.pool, slot)  # N = 1: SOS
        return _Row(slot, s, logits.codes[0, -1], logits.stop[0, -1], aligned)

    @torch.inference_mode()
    def step(self, states: Sequence[GepardState]) -> list[StepOutput]:
        flat = [s.rows[0].next_codes.float() if s.cfg_scale == 1.0 else
                guide(s.rows[0].next_codes.float(), s.rows[1].next_codes.float(), s.cfg_scale) for s in states]
        logits = pad_channels(torch.stack(flat), self._levels)  # (B, C, Lmax)
        with restoring_generators([s.generator for s in states]):  # all or nothing (duet.tts.runtime)
            frames = sample_requests(logits, [s.request.params for s in states], [s.generator for s in states])
            p_stop = torch.sigmoid(torch.stack([s.rows[0].next_stop for s in states]).float()).tolist()  # B floats
            go_on = [i for i, s in enumerate(states) if p_stop[i] <= s.request.params.stop_threshold]
            if go_on:
                rows = [(row, i) for i in go_on for row in states[i].rows]
                self._decode([row for row, _ in rows], frames[[i for _, i in rows]])  # frames (R, C); writes last
        packed = self.fsq.fold(frames.cpu()[:, :, None])  # (B, G, 1); codes leave the runtime on the CPU
        return [StepOutput(codes=packed[i], stop_prob=p_stop[i], layout=s.layout) for i, s in enumerate(states)]

    def release(self, state: GepardState) -> None:
        for row in state.rows:
            self.pool.free(row.slot)

    def _decode(self, rows: list[_Row], frames: torch.Tensor) -> None:
        """Feed frames (R, C) to these rows: one batched decode step; each row's cache grows by one position."""
        aligned = None
        if self.model.is_aligned:
            states = [row.aligned for row in rows]
            positions = [a.position for a in states]
            aligned = torch.cat([a.next_input(self.model.aligned) for a in states])  # (R, 1, D)
        try:
            x = frame_inputs(self.model.audio_interface, frames, aligned)  # (R, 1, D)
            out = self._step.step(x, self.pool, [row.slot for row in rows], [row.length for row in rows])
        except BaseException:
            if aligned is not None:  # as it was: the caller may run the rows again
                for a, p in zip(states, positions):
                    a.position = p
            raise
        for i, row in enumerate(rows):
            row.length += 1
            row.next_codes, row.next_stop = out.codes[i, -1], out.stop[i, -1]


def load_gepard_runtime(path: str | Path, codec: str | None = None, device: str = "cpu",
                        name: str | None = None, language: str | None = None) -> GepardRuntime:
    """The runtime of a shipped Gepard directory; ``codec`` defaults to the codec the checkpoint was trained on,
    the request defaults to the model's own sampling (its config.json), else SPEAK_SAMPLING. ``language`` (how text
    is prepared: English is normalised, other languages are read as written) defaults to the espeak-ng voice its
    phoneme tokenizer is marked with (a voice trained with ``duet voice train --language es``), else English. The
    model is loaded for inference alone (``load_gepard(stock=False)``: no transformers import)."""
    from duet.checkpoint_dir import own_codec
    from duet.codecs import load as load_codec
    from duet.gepard.checkpoint import load_gepard
    from duet.text.prompts import gepard_prompt

    loaded = load_gepard(path, device=device, stock=False)
    if language is None:
        language = model_language(Path(loaded.path) / "tokenizer.json")
    config = GepardRuntimeConfig()
    if loaded.sampling:
        config = replace(config, params=replace(config.params, **loaded.sampling))
    tokenizer = loaded.tokenizer
    codec_name = codec or own_codec(loaded.path, loaded.codec.get("name") or "duet-fsq")
    return GepardRuntime(loaded.model, load_codec(codec_name, device=device),
                         lambda text: gepard_prompt(text, tokenizer, language=language), name or loaded.path.name,
                         config, tokenizer=tokenizer, language=language)


def model_language(tokenizer_file: Path) -> str:
    """The language a model's text is prepared in: its phoneme tokenizer's espeak-ng voice when that is not
    English, else "en" (English text is normalised before it is phonemised)."""
    import json

    from duet.text.phonemes import marked_voice
    from duet.text.prompts import is_english

    voice = marked_voice(json.loads(tokenizer_file.read_text(encoding="utf-8")))
    return "en" if voice is None or is_english(voice) else voice
