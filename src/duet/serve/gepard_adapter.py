"""Gepard behind the serving engine: prefill each request once, then one batched KV-cached decode step per frame.

Gepard's decode loop is a stock transformer step (DESIGN §A, "Principle"), so continuous batching is the usual
LLM kind: requests of different lengths decode together in one forward pass per step. Caches live in one pool,
``(layers, 2, slots, H_kv, capacity, hd)``: each request owns a slot (a row) and its positions [0, L) in it. Each
step

1. samples every running request's frame from its pending logits (per-request parameters and generator,
   ``duet.serve.sampling``) and reads its stop probability (sigmoid of the stop head; Gepard §3.3);
2. feeds the frames of the requests that go on through the backbone as one batch: their pool rows, cut at the
   longest length (right-padded), become a stock ``DynamicCache``; a 4D additive mask (B, 1, 1, L + 1) hides each
   row's padding, and per-row position ids give the new position its own RoPE angle (cached keys were rotated at
   their own positions);
3. scatters the new key/value column of every row back into the pool at its own length, in one indexed write.

So a step costs a fixed number of tensor ops whatever the batch size (no per-request Python loop over layers).
A request whose stop probability exceeds its threshold is not fed (the engine drops that step's phantom frame),
so a request never holds more than ``prompt + max_frames`` positions: exactly what the engine reserved. The pool
itself holds ``slots x capacity`` positions, capacity being the longest reservation seen, growing by doubling.

A request's unset sampling fields take ``GepardServeConfig.params``: temperature 0.6 and top-k 20, what ``duet speak``
samples with (``duet.gepard.generate.SPEAK_SAMPLING``), not the plain temperature 1 a tiny model stumbles on.

Frames are drawn by Gepard's one sampler (``duet.gepard.sampling``), as in ``duet speak``, so a seed gives the same
frames in both (``tests/serve/test_gepard_adapter.py``). Divergences, named: CFG (two-pass) is not served (the
report distils it into the weights, §5-6); voice cloning waits for the Q-Former. Building the step's cache copies
the rows once per step (the same order of memory traffic as attention itself); the vLLM engine
(``duet.serve.vllm``) is the paged, copy-free path.

Aligned text input (``duet.gepard.aligned``): prefill runs the model's own ``prefill`` (its duration predictor lays
the text out, at the request's ``speed``) and each state keeps its row's embedded text, durations and next audio
position; a step adds every row's aligned input, computed for the batch in one call over the rows padded to the
longest text. So the engine and ``duet speak`` feed the model the same inputs.

Shape legend: B running requests, S prompt ids, C channels (32), G packed groups (8), D width, H_kv key/value
heads, hd head_dim, L cached positions.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import torch
from transformers.cache_utils import DynamicCache

from duet.codecs.base import Codec
from duet.codecs.fsq import FSQConfig, GroupFSQ
from duet.errors import DuetError
from duet.gepard.aligned import AlignedState
from duet.gepard.generate import SPEAK_SAMPLING, SamplingConfig, frame_bound
from duet.gepard.heads import pad_channels
from duet.gepard.model import NUM_SERVICE_TOKENS, GepardModel, GepardPrompt
from duet.nn.backbone import run_backbone
from duet.serve.adapter import StepOutput, SynthesisRequest, restoring_generators
from duet.serve.errors import InvalidRequest
from duet.serve.sampling import SamplingParams, sample_requests


@dataclass(frozen=True)
class GepardServeConfig:
    name: str = "gepard"
    voices: tuple[str, ...] = ("default",)  # one speaker until speaker tokens / cloning are trained in
    frames_per_token: float = SamplingConfig.frames_per_token  # default length bound, as duet.gepard.generate
    margin_frames: int = SamplingConfig.margin_frames
    max_frames: int = SamplingConfig.max_frames
    # request defaults: the sampling `duet speak` uses (the fields a request sets replace these)
    params: SamplingParams = SamplingParams(temperature=SPEAK_SAMPLING.temperature, top_k=SPEAK_SAMPLING.top_k)


def text_encoder(tokenizer) -> Callable[[SynthesisRequest], list[int]]:
    """request -> [SOT, *text ids, EOT, SOS], the text prepared as in training (``duet.gepard.data``)."""
    from duet.text.prompts import gepard_prompt

    def encode(request: SynthesisRequest) -> list[int]:
        return gepard_prompt(request.text, tokenizer)

    return encode


@dataclass(eq=False)
class GepardState:
    request: SynthesisRequest
    generator: torch.Generator
    slot: int  # row of the KV pool
    length: int  # cached positions L
    next_codes: torch.Tensor  # (216,) logits of the next frame
    next_stop: torch.Tensor  # () stop logit of the next frame
    aligned: AlignedState | None = None  # aligned text input: this row's text, durations and next position


class KVPool:
    """Per-request KV caches as rows of one tensor (layers, 2, slots, H_kv, capacity, hd), grown by doubling."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device):
        self.kv = torch.zeros((layers, 2, 0, kv_heads, 0, head_dim), dtype=dtype, device=device)
        self._free: list[int] = []

    def alloc(self, positions: int) -> int:
        """A free slot with room for ``positions``; grows the pool (one copy) when needed."""
        slots, capacity = self.kv.shape[2], self.kv.shape[4]
        if not self._free or positions > capacity:
            new_slots = slots if self._free else max(1, 2 * slots)
            new_capacity = capacity if positions <= capacity else max(positions, 2 * capacity)
            grown = self.kv.new_zeros((*self.kv.shape[:2], new_slots, self.kv.shape[3], new_capacity, self.kv.shape[5]))
            grown[:, :, :slots, :, :capacity] = self.kv
            self.kv = grown
            self._free += list(range(slots, new_slots))
        return self._free.pop(0)

    def free(self, slot: int) -> None:
        self._free.append(slot)


def check_gepard_request(request: SynthesisRequest, name: str, voices: Sequence[str], speed: bool = False) -> None:
    """What Gepard (either engine) cannot do yet: cloning, instructions, speed (unless ``speed``: a model with
    aligned text input); and an unknown voice."""
    if request.reference is not None:
        raise InvalidRequest(f"{name} has no voice cloning yet", param="reference_audio", code="cloning_unsupported")
    if request.voice is not None and request.voice not in voices:
        raise InvalidRequest(f"unknown voice {request.voice!r}; this model has {', '.join(voices)}", param="voice",
                             code="voice_not_found")
    if request.instructions:
        raise InvalidRequest(f"{name} takes no instructions", param="instructions")
    if request.speed != 1.0 and not speed:
        raise InvalidRequest(f"{name} has no speed control; use speed 1.0", param="speed")


def check_predicted_length(frames: float, max_frames: int, frame_rate: float, margin_frames: int = 0) -> None:
    """An aligned model knows how long a text will be: refuse one that would not end ``margin_frames`` before the
    bound (sampled speech runs a little longer or shorter than predicted; past the bound it would be cut)."""
    if frames + margin_frames > max_frames:
        room = (max_frames - margin_frames) / frame_rate
        raise InvalidRequest(f"this text needs about {frames / frame_rate:.1f} s of speech; one request holds "
                             f"{room:.1f} s (and {margin_frames / frame_rate:.1f} s of margin); split it into shorter "
                             "requests", param="input", code="context_length_exceeded")


@dataclass(eq=False)
class GepardAdapter:
    """Implements ``duet.serve.adapter.ModelAdapter`` for a :class:`GepardModel` and a packed-token codec."""

    model: GepardModel
    codec: Codec
    encode_text: Callable[[SynthesisRequest], list[int]]
    config: GepardServeConfig = GepardServeConfig()
    fsq: GroupFSQ = field(default_factory=lambda: GroupFSQ(FSQConfig()))

    def __post_init__(self) -> None:
        cfg, mcfg = self.config, self.model.config
        if tuple(self.fsq.config.channel_levels) != tuple(mcfg.channel_levels):
            raise DuetError("the FSQ packing does not match the model's channel levels")
        if len(self.codec.codebook_sizes) != self.fsq.config.num_groups:
            raise DuetError(f"codec has {len(self.codec.codebook_sizes)} code streams, Gepard packs "
                            f"{self.fsq.config.num_groups} groups")
        self.model.eval()
        self.name = cfg.name
        self.voices = cfg.voices
        self.supports_cloning = False
        self.max_frames = cfg.max_frames
        self.default_params = cfg.params
        bb = mcfg.backbone
        self._dtype = self.model.embed_tokens.weight.dtype
        self._device = self.model.embed_tokens.weight.device
        self._pool = KVPool(bb.num_layers, bb.num_kv_heads, bb.head_dim, self._dtype, self._device)
        itemsize = torch.empty((), dtype=self._dtype).element_size()
        self.cache_bytes_per_position = 2 * bb.num_layers * bb.num_kv_heads * bb.head_dim * itemsize
        self._bound = SamplingConfig(frames_per_token=cfg.frames_per_token, margin_frames=cfg.margin_frames,
                                     max_frames=cfg.max_frames)
        self._levels = tuple(mcfg.channel_levels)

    # --- admission-time questions (any thread) ----------------------------------------------------------------------

    def validate(self, request: SynthesisRequest) -> None:
        check_gepard_request(request, self.name, self.voices, speed=self.model.is_aligned)
        limit = self.model.config.backbone.max_positions
        prompt = self.prompt_positions(request)
        if prompt >= limit:  # before the duration model, whose cost grows with the square of the text
            raise InvalidRequest(f"the text takes {prompt} positions, the model has {limit}; split it into shorter "
                                 "requests", param="input", code="context_length_exceeded")
        if self.model.is_aligned and request.params.max_frames is None:  # it knows how long the text will be
            ids = torch.tensor([self.encode_text(request)], dtype=torch.long, device=self._device)  # (1, S)
            lengths = torch.tensor([ids.shape[1]], device=self._device)
            frames = float(self.model.duration.predict(ids, lengths, request.speed).sum())
            check_predicted_length(frames, self.frame_bound(request), self.codec.frame_rate, self.config.margin_frames)
        need = self.prompt_positions(request) + (request.params.max_frames or self.frame_bound(request))
        if need > limit:
            raise InvalidRequest(f"prompt + frames = {need} positions exceeds the model's {limit}", param="input",
                                 code="context_length_exceeded")

    def frame_bound(self, request: SynthesisRequest) -> int:
        return frame_bound(len(self.encode_text(request)) - NUM_SERVICE_TOKENS, self._bound)

    def prompt_positions(self, request: SynthesisRequest) -> int:
        return len(self.encode_text(request))

    # --- the engine thread ------------------------------------------------------------------------------------------

    @torch.no_grad()
    def prefill(self, requests: Sequence[SynthesisRequest], seeds: Sequence[int]) -> list[GepardState]:
        states = []
        for request, seed in zip(requests, seeds):  # one by one: prompts differ in length, and prefill is once
            ids = torch.tensor([self.encode_text(request)], dtype=torch.long, device=self._device)  # (1, S)
            aligned = None
            if self.model.is_aligned:
                logits, aligned = self.model.prefill(GepardPrompt(ids, speed=request.speed))
                cache = aligned.cache
                aligned.cache = None  # the pool holds it from here
            else:
                cache = self.model.new_cache()
                logits = self.model.logits(text_ids=ids, cache=cache)  # N = 1: the SOS position
            s = ids.shape[1]
            slot = self._pool.alloc(s + (request.params.max_frames or self.frame_bound(request)))
            prompt_kv = [torch.stack([c.keys[0], c.values[0]]) for c in cache.layers]  # layers x (2, H_kv, S, hd)
            self._pool.kv[:, :, slot, :, :s] = torch.stack(prompt_kv)
            generator = torch.Generator(device=self._device).manual_seed(seed)
            states.append(GepardState(request, generator, slot, s, logits.codes[0, -1], logits.stop[0, -1], aligned))
        return states

    @torch.no_grad()
    def step(self, states: Sequence[GepardState]) -> list[StepOutput]:
        logits = pad_channels(torch.stack([s.next_codes for s in states]).float(), self._levels)  # (B, C, Lmax)
        with restoring_generators([s.generator for s in states]):  # all or nothing (duet.serve.adapter)
            frames = sample_requests(logits, [s.request.params for s in states], [s.generator for s in states])
            p_stop = torch.sigmoid(torch.stack([s.next_stop for s in states]).float()).tolist()  # B floats
            go_on = [i for i, s in enumerate(states) if p_stop[i] <= s.request.params.stop_threshold]
            if go_on:
                self._decode([states[i] for i in go_on], frames[go_on])  # frames (B, C); writes come last
        packed = self.fsq.fold(frames.cpu()[:, :, None])  # (B, G, 1); codes leave the adapter on the CPU
        return [StepOutput(codes=packed[i], stop_prob=p_stop[i]) for i in range(len(states))]

    def release(self, state: GepardState) -> None:
        self._pool.free(state.slot)

    def _decode(self, states: list[GepardState], frames: torch.Tensor) -> None:
        """Feed frames (B, C) for these rows: one batched forward; each row's cache grows by one position."""
        b = len(states)
        slots = torch.tensor([s.slot for s in states], device=self._device)  # (B,)
        lengths = torch.tensor([s.length for s in states], device=self._device)  # (B,)
        lmax = max(s.length for s in states)
        if lmax >= self._pool.kv.shape[4]:
            raise RuntimeError("a request outgrew its KV reservation")  # the engine's bound prevents this
        rows = self._pool.kv[:, :, slots, :, :lmax]  # (layers, 2, B, H_kv, L, hd), right-padded
        cache = DynamicCache(config=self.model.model.config)
        for layer in range(rows.shape[0]):
            cache.update(rows[layer, 0], rows[layer, 1], layer)
        # Column j < L holds row b's position j if j < L_b (else padding); column L is the new position.
        column = torch.arange(lmax + 1, device=self._device)  # (L + 1,)
        visible = (column[None] < lengths[:, None]) | (column[None] == lmax)  # (B, L + 1)
        mask = torch.zeros((b, 1, 1, lmax + 1), dtype=self._dtype, device=self._device)  # (B, 1, Q=1, KV)
        # additive, not boolean: read correctly by both sdpa and eager attention (DESIGN §C)
        mask.masked_fill_(~visible[:, None, None, :], torch.finfo(self._dtype).min)
        x = self.model.audio_interface(frames[:, None, :]).to(self._dtype)  # (B, 1, D)
        if self.model.is_aligned:
            x = x + self._aligned_inputs(states)
        hidden = run_backbone(self.model.model, x, cache=cache, position_ids=lengths[:, None], attention_mask=mask)
        out = self.model.heads(hidden)  # codes (B, 1, 216), stop (B, 1)
        new = torch.stack([torch.stack([c.keys[:, :, -1], c.values[:, :, -1]]) for c in cache.layers])
        # new (layers, 2, B, H_kv, hd); the indexed view puts its advanced dim first: (B, layers, 2, H_kv, hd)
        self._pool.kv[:, :, slots, :, lengths] = new.permute(2, 0, 1, 3, 4)
        for i, s in enumerate(states):
            s.length += 1
            s.next_codes, s.next_stop = out.codes[i, -1], out.stop[i, -1]


    def _aligned_inputs(self, states: list[GepardState]) -> torch.Tensor:
        """Each row's aligned input (B, 1, D) at its next audio position, one batched call; positions advance."""
        rows = [s.aligned for s in states]
        assert all(r is not None for r in rows)
        smax = max(r.text.shape[1] for r in rows)
        text = torch.zeros((len(rows), smax, rows[0].text.shape[2]), dtype=rows[0].text.dtype, device=self._device)
        durations = torch.zeros((len(rows), smax), device=self._device)
        for i, r in enumerate(rows):
            text[i, : r.text.shape[1]] = r.text[0]
            durations[i, : r.durations.shape[1]] = r.durations[0]
        lengths = torch.tensor([r.text.shape[1] for r in rows], device=self._device)
        positions = torch.tensor([[r.position] for r in rows], device=self._device)  # (B, 1)
        for r in rows:
            r.position += 1
        return self.model.aligned(text, lengths, durations, positions).to(self._dtype)


def load_gepard_adapter(checkpoint: str, codec: str | None = None, name: str | None = None) -> GepardAdapter:
    """The adapter for a shipped Gepard model (a name such as ``gepard-tiny`` or a directory); ``codec`` defaults
    to the codec the checkpoint was trained on."""
    from duet.codecs import load as load_codec
    from duet.gepard.checkpoint import load_gepard
    from duet.shipped import resolve_model

    path = resolve_model(checkpoint)
    loaded = load_gepard(path)
    codec_name = codec or loaded.codec.get("name") or "duet-fsq"
    config = GepardServeConfig(name=name or path.name)
    if loaded.sampling:  # the model's own defaults (duet.gepard.checkpoint), as duet speak uses them
        config = replace(config, params=replace(config.params, **loaded.sampling))
    return GepardAdapter(loaded.model, load_codec(codec_name), text_encoder(loaded.tokenizer), config)
