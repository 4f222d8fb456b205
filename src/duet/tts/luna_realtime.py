"""Luna-TTS Realtime's runtime: one step = one refinement step of a request's active block; each block's frames go
out the moment it is committed, for ``duet speak --stream`` and ``duet serve`` alike (``duet.tts.runtime``).

Luna Realtime (DESIGN §B, ``duet.luna.stream``) is autoregressive across blocks of B_k frames and denoises one block
at a time with S MaskGIT steps against a KV cache of the conditions and the committed blocks. Per request the runtime
holds a ``KVBlockSession`` (its KV cache), a ``DecodeConfig`` and a ``torch.Generator``. A step, for each request:

1. runs its session's pass over its active block (all masked at the block's first step), batched with the other
   requests' passes ("Batching" below);
2. at the block's first step reads the end head (``stream.end_frame``, conditional row): the first frame past the end
   of speech, cut to the frames the request's bound leaves; frames from there on stay masked and get no code;
3. applies ``decode.unmask_step`` to the guided logits with the request's step index, config and generator;
4. after the block's S-th step (or at once when the end falls on the block's first frame) returns the block's
   frames before the end, in codec layout (Q, n), and commits the block to the session's KV cache.

This is ``stream.stream_blocks`` unrolled into a state machine, one refinement step per call, drawing the same random
numbers in the same order, so a request reproduces ``stream_speech`` at the same seed exactly.

An aligned model's layout (the duration predictor's frames per token, as the session's aligned input reads them)
goes out with every step of the request (``StepOutput.layout``, ``duet.tts.timestamps``: word timings); where the
end head ends the speech, the audio ends, whatever the layout had left. A request's SSML pauses and rates
(``SynthesisRequest.pace``) change those durations first (``duet.tts.pace_layout``).

How a request ends (``duet.tts.runtime.settle``): the end head places the end inside the active block: its frames
before the end go out with ``final=True`` ("stop"; with the end at the block's first frame that last output has no
frames); or the request reaches its length bound first: the last block (cut to the bound) goes out with
``final=False`` and its frames reach the bound ("bound").

Bound (duet's choice; the report names only "a maximum length as a serving bound"): ``bound_for``: at most
``StreamConfig.max_frames``, what the model's positions leave after the text, and, with ``bound_factor`` set,
``bound_factor`` x the frozen duration predictor's length + one block, so an end head that never fires cannot run a
short sentence on to 30 s. A request's ``max_frames`` replaces it (at most the positions left).

Floor (duet's choice too): with ``floor_factor`` set, the end head is not read before ``floor_factor`` x the duration
predictor's length (``floor_for``), so an end head that fires early cannot cut a sentence short. A small model needs
it: luna-realtime-tiny's end head learned the corpus's typical length more than the text's (on 40 held-out sentences
it stopped at 0.55x the recordings' length on average), while the duration predictor, which reads the text token by
token, is off by about 10%.

Batching: the running requests' block passes go through the model together, one forward pass per query length
(``duet.luna.stream_batch``: each session's cache right-padded to the longest, a mask per row, so a row sees exactly
what its own step would); the sampling after it runs per request with its own generator, as ``stream_blocks`` does.
A request alone takes its session's own step, so it reproduces ``stream_speech`` exactly; batched, its logits equal
its solo ones up to float rounding (the padded shapes may reduce in another order; batch invariance as
``duet.tts.luna`` names it), and its tokens equal its solo tokens in the tests. A batch whose forward pass raises
changes no state and runs again one request at a time, so a failure stays with its request.

Per request: ``emotion`` (the emotion token in the instruction context of the text ids, ``duet.tts.luna_parts``),
``steps`` per block (default ``StreamConfig.decode.steps``, 8 as deployed in §5.2), ``temperature``,
``top_k``, ``cfg_scale``, ``max_frames``, ``seed``. Refused: ``top_p`` < 1 (no nucleus filter), ``speed`` != 1 (the
model decides where speech ends), cloning, a text whose predicted length exceeds ``max_frames`` (30 s) while the
request sets no bound, or that leaves the model no positions. ``stop_threshold`` does not apply: the end threshold
is ``StreamConfig.end_threshold``.

Memory: ``cache_bytes_per_position`` is the KV cache's real cost (``runtime.kv_cache_bytes``), rows = 2 with CFG
(each session caches a conditional and an unconditional row). A caller reserves text + bound positions; during a
step the active block's B_k positions sit in the cache on top, for that step only.

Shape legend: R session rows (1, or 2 with CFG), B_k frames per block, Q codebooks, K codes per codebook, S text ids.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import torch

from duet.errors import DuetError, InvalidRequest
from duet.luna.decode import DecodeConfig, guide, unmask_step
from duet.luna.duration import DurationPredictor
from duet.luna.realtime import LunaRealtime, RealtimeLogits
from duet.luna.stream import KVBlockSession, StreamConfig, end_frame
from duet.luna.stream_batch import step_sessions
from duet.sampling import SamplingParams
from duet.tts.luna_parts import LunaParts, codec_of, request_decode_config
from duet.tts.pace_layout import paced_durations
from duet.tts.request import SynthesisRequest
from duet.tts.runtime import FamilyTraits, PerRequest, StepCost, StepOutput, kv_cache_bytes
from duet.tts.timestamps import TextLayout


@dataclass(frozen=True)
class RealtimeRuntimeConfig:
    stream: StreamConfig = StreamConfig()  # steps per block (8), sampling, CFG, end threshold, max_frames (750)
    bound_factor: float | None = 2.0  # cap at bound_factor x predicted frames + one block; None: max_frames only
    floor_factor: float | None = 0.8  # no end before floor_factor x predicted frames; None: the end head alone
    language: str = "en"

    def __post_init__(self) -> None:
        if self.bound_factor is not None and not self.bound_factor > 0:
            raise DuetError(f"bound_factor must be positive or None, got {self.bound_factor}")
        if self.floor_factor is not None and not self.floor_factor >= 0:
            raise DuetError(f"floor_factor must be >= 0 or None, got {self.floor_factor}")


@dataclass(frozen=True)
class _Plan:
    ids: list[int]  # wrapped text ids (S,)
    predicted: int  # frames the duration predictor expects for the text (rounded)
    bound: int  # bound_for(ids)
    floor: int  # floor_for(ids): no end of speech before this frame
    paced: torch.Tensor | None = None  # (S,) an aligned model's durations with the request's SSML pace, or None


@dataclass(eq=False)
class RealtimeState:
    request: SynthesisRequest
    session: KVBlockSession | None  # None once released
    decode: DecodeConfig
    generator: torch.Generator
    max_frames: int  # the request's bound
    min_frames: int = 0  # the request's floor (the end head is not read before it)
    produced: int = 0  # frames handed out
    blocks: int = 0  # blocks handed out
    # the active block
    step: int = 0  # refinement steps done on it (0: not started)
    tokens: torch.Tensor | None = field(default=None, repr=False)  # (1, B_k, Q); mask id where undecided
    still: torch.Tensor | None = field(default=None, repr=False)  # (1, B_k, Q) bool: cells still to generate
    num_cells: torch.Tensor | None = field(default=None, repr=False)  # (1,) cells to generate in the block
    end_model: int = 0  # the end head's first past-the-end frame in the block (B_k: none)
    frames: int = 0  # frames the block generates: end_model cut to the frames the bound leaves
    done: bool = False
    layout: TextLayout | None = field(default=None, repr=False)  # aligned models: the text over the frames


class RealtimeRuntime(LunaParts):
    """Implements ``duet.tts.runtime.FamilyRuntime`` for a :class:`LunaRealtime` model, its frozen duration
    predictor and a causal codec."""

    def __init__(self, model: LunaRealtime, duration: DurationPredictor, tokenizer: Any, codec,
                 name: str = "luna-realtime", config: RealtimeRuntimeConfig = RealtimeRuntimeConfig()):
        super().__init__(model, duration, tokenizer, codec, model.config.luna, name, config.language)
        self.config = config
        self.traits = FamilyTraits(speed="the model decides where speech ends", steps=True,
                                   timings=self.grid.is_aligned, **self.emotion_traits)
        self.block_size = model.block_size
        weight = model.luna.audio_embed.weight
        self._device = weight.device
        bb = self.grid.backbone
        rows = 2 if config.stream.decode.cfg_scale != 1.0 else 1  # KVBlockSession(guidance=...) rows
        self.cache_bytes_per_position = kv_cache_bytes(bb.num_layers, bb.num_kv_heads, bb.head_dim, weight.dtype, rows)
        self._empty = self.no_codes()  # (Q_c, 0)
        self._plans: PerRequest[_Plan] = PerRequest()

    @property
    def max_frames(self) -> int:
        return min(self.config.stream.max_frames, self.grid.backbone.max_positions - 1)

    @property
    def default_params(self) -> SamplingParams:
        decode = self.config.stream.decode
        return SamplingParams(temperature=decode.temperature, top_k=decode.top_k)

    # --- bound and floor ---------------------------------------------------------------------------------------------

    def bound_for(self, ids: list[int], predicted: float | None = None) -> int:
        """The most frames a piece with wrapped text ids may run to (module docstring); ``predicted`` is
        ``predicted_frames(ids)`` when the caller has it already."""
        limit = min(self.config.stream.max_frames, self.grid.backbone.max_positions - len(ids))
        if limit < 1:
            raise DuetError(f"the text is too long for {self.name} ({len(ids)} tokens): split it into sentences")
        if self.config.bound_factor is None:
            return limit
        predicted = self.predicted_frames(ids) if predicted is None else predicted
        return min(limit, math.ceil(self.config.bound_factor * predicted) + self.block_size)

    def floor_for(self, ids: list[int], predicted: float | None = None) -> int:
        """The frames a piece speaks before its end head is read (module docstring; 0 without ``floor_factor``)."""
        if self.config.floor_factor is None:
            return 0
        predicted = self.predicted_frames(ids) if predicted is None else predicted
        return math.floor(self.config.floor_factor * predicted)

    def aligned_durations(self, ids: list[int]) -> torch.Tensor | None:
        """An aligned model's layout (S,): the predictor's durations as they are (the end head, not a set length,
        ends the speech); None for other models."""
        return self.token_durations(ids)[0][0] if self.grid.is_aligned else None

    # --- admission-time questions (any thread) ----------------------------------------------------------------------

    def check(self, request: SynthesisRequest) -> None:
        request_decode_config(self.config.stream.decode, request)
        plan = self._plan(request)
        bound = request.params.max_frames
        if bound is None and plan.predicted > self.max_frames:
            raise InvalidRequest(
                f"this text needs about {plan.predicted} frames, more than the {self.max_frames} one request can "
                f"hold ({self.max_frames / self.codec.frame_rate:.0f} s); split it into shorter requests",
                param="input", code="context_length_exceeded")
        limit = self.grid.backbone.max_positions
        if bound is not None and len(plan.ids) + bound > limit:
            raise InvalidRequest(f"text + max_frames = {len(plan.ids)} + {bound} positions exceeds the model's "
                                 f"{limit}", param="max_frames", code="context_length_exceeded")

    def frame_bound(self, request: SynthesisRequest) -> int:
        return min(self._plan(request).bound, self.max_frames)

    def prompt_positions(self, request: SynthesisRequest) -> int:
        return len(self._plan(request).ids)

    def step_cost(self, request: SynthesisRequest, frames: int) -> StepCost:
        decode = request_decode_config(self.config.stream.decode, request)
        rows = 1 if decode.cfg_scale == 1.0 else 2
        # S passes per block over its B_k frames; the last block holds the end
        return StepCost(decode.steps * (frames // self.block_size + 1), rows * self.block_size)

    def _plan(self, request: SynthesisRequest) -> _Plan:
        return self._plans.get(request, self._predict)

    def _predict(self, request: SynthesisRequest) -> _Plan:
        ids = self.request_ids(request)
        paced = None
        if request.pace is not None and request.pace.layout and self.grid.is_aligned:
            paced = torch.tensor(paced_durations(self.token_durations(ids)[0][0].tolist(), ids, request.text,
                                                 request.pace, self.tokenizer, self.codec.frame_rate, self.language))
            predicted = float(paced.sum())
        else:
            predicted = self.predicted_frames(ids)  # one duration-predictor pass for the whole plan
        return _Plan(ids, round(predicted), self.bound_for(ids, predicted), self.floor_for(ids, predicted), paced)

    # --- the decode thread ------------------------------------------------------------------------------------------

    def prefill(self, requests: Sequence[SynthesisRequest], seeds: Sequence[int]) -> list[RealtimeState]:
        states = []
        for request, seed in zip(requests, seeds):
            plan = self._plan(request)
            decode = request_decode_config(self.config.stream.decode, request)
            text_ids = torch.tensor(plan.ids, dtype=torch.long, device=self._device)  # (S,)
            durations = self.aligned_durations(plan.ids) if plan.paced is None else plan.paced.to(self._device)
            session = KVBlockSession(self.model, text_ids, None, guidance=decode.cfg_scale != 1.0,
                                     durations=durations)
            generator = torch.Generator().manual_seed(seed)  # a CPU generator: the sampler moves its numbers
            bound = request.params.max_frames or self.frame_bound(request)
            layout = None if durations is None else TextLayout(request.text, tuple(plan.ids),
                                                               tuple(durations.tolist()), self.tokenizer,
                                                               self.language)
            states.append(RealtimeState(request, session, decode, generator, bound, min(plan.floor, bound),
                                        layout=layout))
        return states

    @torch.no_grad()
    def step(self, states: Sequence[RealtimeState]) -> list[StepOutput]:
        live = [s for s in states if not s.done and s.session is not None]
        try:
            logits = step_sessions([s.session for s in live], [self._block(s) for s in live])  # one pass per n_q
        except Exception as err:
            if len(live) > 1:  # one by one: the failure stays with its request (no state changed)
                return [out for s in states for out in self.step([s])]
            return [StepOutput(codes=self._empty, error=f"decode step failed: {err}") if s in live
                    else StepOutput(codes=self._empty, final=True) for s in states]
        of = {id(s): out for s, out in zip(live, logits)}
        outs = []
        for s in states:
            if id(s) not in of:  # the caller closes a request at its last output; never reached
                outs.append(StepOutput(codes=self._empty, final=True))
                continue
            try:
                out = self._refine(s, of[id(s)])
                outs.append(out if s.layout is None else replace(out, layout=s.layout))
            except Exception as err:
                outs.append(StepOutput(codes=self._empty, error=f"decode step failed: {err}"))
        return outs

    def release(self, state: RealtimeState) -> None:
        state.session = None  # its KV cache goes with it
        state.tokens = state.still = None

    def _block(self, s: RealtimeState) -> torch.Tensor:
        """The active block of ``s`` as this step refines it, (R, B_k, Q); a new block starts all masked."""
        assert s.session is not None
        if s.step == 0:
            s.tokens = torch.full((1, self.block_size, self.grid.num_codebooks), self.grid.mask_id,
                                  dtype=torch.long)  # (1, B_k, Q)
            s.still = torch.zeros_like(s.tokens, dtype=torch.bool)
        assert s.tokens is not None
        return s.tokens.expand(s.session.num_rows, -1, -1)

    def _refine(self, s: RealtimeState, out: RealtimeLogits) -> StepOutput:
        """One refinement step of ``s``'s active block from its logits (codes (R, B_k, Q, K), end (R, B_k)):
        ``stream.stream_blocks``'s inner loop body after ``session.step``."""
        assert s.tokens is not None and s.still is not None
        s.step += 1
        if s.step == 1:
            s.tokens, s.still = s.tokens.to(out.codes.device), s.still.to(out.codes.device)
            # conditional row (CFG is on codes only); no end before the request's floor
            s.end_model = end_frame(out.end[0], self.config.stream.end_threshold, s.min_frames - s.produced)
            s.frames = min(s.end_model, s.max_frames - s.produced)
            s.still[:, : s.frames] = True  # frames past the end stay masked, as training shows them
            s.num_cells = s.still.flatten(1).sum(dim=1)  # (1,)
        if s.frames > 0:
            guided = guide(out.codes, 1, s.decode)  # (1, B_k, Q, K)
            s.tokens, commit = unmask_step(guided, s.tokens, s.still, s.num_cells, s.step, s.decode, s.generator)
            s.still &= ~commit
            if s.step < s.decode.steps:
                return StepOutput(codes=self._empty)
        return self._finish_block(s)

    def _finish_block(self, s: RealtimeState) -> StepOutput:
        assert s.session is not None and s.tokens is not None
        block = s.tokens[0, : s.frames]  # (n, Q)
        room = s.max_frames - s.produced
        final = s.end_model < self.block_size and s.end_model <= room  # end of speech: "stop"
        if final or s.produced + s.frames >= s.max_frames:
            s.done = True  # at the bound without final: the frames reach max_frames, "bound"
        else:
            s.session.commit(block.clone())  # immutable context from the next step on
        s.produced += s.frames
        s.blocks += 1
        s.step, s.tokens, s.still = 0, None, None
        return StepOutput(codes=self.codec_codes(block), final=final)  # (Q_c, n) codec layout


def load_realtime_runtime(path: str | Path, codec: str | None = None, device: str = "cpu", name: str | None = None,
                          config: RealtimeRuntimeConfig = RealtimeRuntimeConfig()) -> RealtimeRuntime:
    """The runtime of a shipped Luna Realtime directory (``duet.luna.shipped.save_luna_realtime``); ``codec``
    defaults to the codec the checkpoint was trained on."""
    from duet.luna.shipped import load_luna_realtime

    loaded = load_luna_realtime(path, device=device)
    bundle = loaded.bundle
    stream = config.stream  # the model's own decoding defaults, where it has them
    config = replace(config, stream=replace(stream, decode=replace(stream.decode, **loaded.decode)))
    return RealtimeRuntime(bundle.acoustic, bundle.duration, loaded.tokenizer, codec_of(loaded, codec, device),
                           name or loaded.path.name, config)
