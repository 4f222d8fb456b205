"""Luna-TTS Realtime behind the serving engine: one engine step = one refinement step of every running request's
active block; each block's frames go out the moment it is committed.

Luna Realtime (DESIGN §B, ``duet.luna.stream``) is autoregressive across blocks of B_k frames and denoises one block
at a time with S MaskGIT steps against a KV cache of the conditions and the committed blocks. Per request the adapter
holds the offline pipeline's own pieces: a ``KVBlockSession`` (its KV cache), a ``DecodeConfig`` and a
``torch.Generator``. An engine step, for each running request:

1. runs ``session.step`` on its active block (all masked at the block's first step);
2. at the block's first step reads the end head (``stream.end_frame``, conditional row): the first frame past the end
   of speech, cut to the frames the request's bound leaves; frames from there on stay masked and get no code;
3. applies ``decode.unmask_step`` to the guided logits with the request's step index, config and generator;
4. after the block's S-th step (or at once when the end falls on the block's first frame) returns the block's
   frames before the end, in codec layout (Q, n), and commits the block to the session's KV cache.

This is ``stream.stream_blocks`` unrolled into a state machine, one refinement step per call, drawing the same random
numbers in the same order, so a request reproduces ``RealtimeSpeaker`` / ``stream_speech`` at the same seed exactly.

How a request ends (the engine's reasons, ``engine.py``):
- the end head places the end inside the active block: its frames before the end go out with ``final=True`` and the
  engine reports "stop" (``duet.finish.STOP``). With the end at the block's first
  frame that last output has no frames;
- the request reaches its length bound first: the last block (cut to the bound) goes out with ``final=False``, its
  frames reach the slot's ``max_frames`` (the same number, ``frame_bound`` or the request's ``max_frames``) and the
  engine reports "bound" (``duet.finish.BOUND``).

Bound: ``RealtimeSpeaker.bound_for`` (the speaker's ``bound_factor`` x the duration predictor's frames + one block,
at most ``StreamConfig.max_frames`` and what the model's positions leave after the text); a request's ``max_frames``
replaces it (at most the positions left). Floor: ``RealtimeSpeaker.floor_for`` (the end head is not read before the
speaker's ``floor_factor`` x the predicted frames), as the speaker does.

Batching, named: requests run one after another inside an engine step, not in one batched forward pass. Each
``KVBlockSession`` holds its own transformers cache whose length (conditions + committed blocks) differs per request,
and every step crops the active block off again; one padded forward would need a per-row-length cache with a per-row
crop, which the stock cache does not offer. The engine still batches by refinement step in the scheduling sense
(requests join and leave at any step, each with its own steps, sampling and bound), and each request's result is its
solo result by construction: nothing in a row's computation depends on its neighbours.

Per request: ``steps`` per block (default ``StreamConfig.decode.steps`` of the speaker, 8 as deployed in §5.2),
``temperature``, ``top_k``, ``max_frames``, ``seed``. Refused (``InvalidRequest``): ``top_p`` < 1 (no nucleus filter),
``speed`` != 1 (the model decides where speech ends, as ``RealtimeSpeaker`` has no speed), cloning and voices other
than "default" (as ``luna_adapter``), empty text, a text whose predicted length exceeds ``max_frames`` (30 s) or that
leaves the model no positions. ``stop_threshold`` does not apply: the end threshold is the speaker's. One text is one
utterance: the adapter does not split sentences (no code exists for the silent gap between pieces).

Memory: ``cache_bytes_per_position`` is the KV cache's real cost, rows x layers x (K and V) x kv_heads x head_dim x
dtype size, rows = 2 with CFG (each session caches a conditional and an unconditional row). The engine reserves
text + bound positions; during a step the active block's B_k positions sit in the cache on top, for that step only.

Shape legend: R session rows (1, or 2 with CFG), B_k frames per block, Q codebooks, K codes per codebook, S text ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from duet.errors import DuetError
from duet.luna.decode import DecodeConfig, guide, unmask_step
from duet.luna.stream import KVBlockSession, end_frame
from duet.serve.adapter import StepOutput, SynthesisRequest
from duet.serve.errors import InvalidRequest
from duet.serve.luna_adapter import PerRequest, refuse_unsupported, request_decode_config
from duet.serve.sampling import SamplingParams
from duet.text.prompts import luna_prompt
from duet.tts.luna_realtime import RealtimeSpeaker


@dataclass(frozen=True)
class RealtimeServeConfig:
    name: str = "luna-realtime"
    voices: tuple[str, ...] = ("default",)  # no speaker conditioning: the voice the text condition draws


@dataclass(frozen=True)
class _Plan:
    ids: list[int]  # wrapped text ids (S,)
    predicted: int  # frames the duration predictor expects for the text (rounded)
    bound: int  # RealtimeSpeaker.bound_for(ids)
    floor: int  # RealtimeSpeaker.floor_for(ids): no end of speech before this frame


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


@dataclass(eq=False)
class LunaRealtimeAdapter:
    """Implements ``duet.serve.adapter.ModelAdapter`` for a :class:`RealtimeSpeaker` (model, duration predictor,
    tokenizer, codec and the streaming config whose defaults the requests start from)."""

    speaker: RealtimeSpeaker
    config: RealtimeServeConfig = RealtimeServeConfig()

    def __post_init__(self) -> None:
        self.model = self.speaker.model.eval()
        self.codec = self.speaker.codec
        self.name = self.config.name
        self.voices = self.config.voices
        self.supports_cloning = False
        self._stream = self.speaker.config.stream  # default steps, CFG, end threshold, max_frames
        backbone = self.model.config.luna.backbone
        self.max_frames = min(self._stream.max_frames, backbone.max_positions - 1)
        self.default_params = SamplingParams(temperature=self._stream.decode.temperature,
                                             top_k=self._stream.decode.top_k)
        self.block_size = self.model.block_size
        weight = self.model.luna.audio_embed.weight
        self._device = weight.device
        rows = 2 if self._stream.decode.cfg_scale != 1.0 else 1  # KVBlockSession(guidance=...) rows
        # Keys and values of every layer, per cached position, in each row.
        self.cache_bytes_per_position = (rows * backbone.num_layers * 2 * backbone.num_kv_heads * backbone.head_dim
                                         * weight.element_size())
        self._empty = torch.zeros((self.model.config.luna.num_codebooks, 0), dtype=torch.long)  # (Q, 0)
        self._plans: PerRequest[_Plan] = PerRequest()

    # --- admission-time questions (any thread) ----------------------------------------------------------------------

    def validate(self, request: SynthesisRequest) -> None:
        refuse_unsupported(request, self.name, self.voices)
        if request.speed != 1.0:
            raise InvalidRequest(f"{self.name} has no speed control (the model decides where speech ends); speed "
                                 f"must be 1, got {request.speed}", param="speed")
        self._decode_config(request)
        plan = self._plan(request)
        bound = request.params.max_frames
        if bound is None and plan.predicted > self.max_frames:
            raise InvalidRequest(
                f"this text needs about {plan.predicted} frames, more than the {self.max_frames} one request can "
                f"hold ({self.max_frames / self.codec.frame_rate:.0f} s); split it into shorter requests",
                param="input", code="context_length_exceeded")
        limit = self.model.config.luna.backbone.max_positions
        if bound is not None and len(plan.ids) + bound > limit:
            raise InvalidRequest(f"text + max_frames = {len(plan.ids)} + {bound} positions exceeds the model's "
                                 f"{limit}", param="max_frames", code="context_length_exceeded")

    def frame_bound(self, request: SynthesisRequest) -> int:
        return min(self._plan(request).bound, self.max_frames)

    def prompt_positions(self, request: SynthesisRequest) -> int:
        return len(self._plan(request).ids)

    def _decode_config(self, request: SynthesisRequest) -> DecodeConfig:
        return request_decode_config(self._stream.decode, request)

    def _plan(self, request: SynthesisRequest) -> _Plan:
        return self._plans.get(request, self._predict)

    def _predict(self, request: SynthesisRequest) -> _Plan:
        if not request.text.strip():
            raise InvalidRequest("the text is empty", param="input")
        ids = luna_prompt(request.text, self.speaker.tokenizer, language=self.speaker.config.language)
        try:
            predicted = self.speaker.predicted_frames(ids)  # one duration-predictor pass for the whole plan
            bound = self.speaker.bound_for(ids, predicted)
        except DuetError as err:  # the text alone fills the model's positions
            raise InvalidRequest(str(err), param="input", code="context_length_exceeded") from err
        return _Plan(ids, round(predicted), bound, self.speaker.floor_for(ids, predicted))

    # --- the engine thread ------------------------------------------------------------------------------------------

    def prefill(self, requests: Sequence[SynthesisRequest], seeds: Sequence[int]) -> list[RealtimeState]:
        states = []
        for request, seed in zip(requests, seeds):
            plan = self._plan(request)
            decode = self._decode_config(request)
            text_ids = torch.tensor(plan.ids, dtype=torch.long, device=self._device)  # (S,)
            session = KVBlockSession(self.model, text_ids, None, guidance=decode.cfg_scale != 1.0,
                                     durations=self.speaker.aligned_durations(plan.ids))
            # A CPU generator, as RealtimeSpeaker seeds one (the sampler draws on it and moves the numbers).
            generator = torch.Generator().manual_seed(seed)
            bound = request.params.max_frames or self.frame_bound(request)
            states.append(RealtimeState(request, session, decode, generator, bound, min(plan.floor, bound)))
        return states

    @torch.no_grad()
    def step(self, states: Sequence[RealtimeState]) -> list[StepOutput]:
        outs = []
        for s in states:  # one request after another (module docstring, "Batching"): a failure stays with its request
            try:
                outs.append(self._refine(s))
            except Exception as err:
                outs.append(StepOutput(codes=self._empty, error=f"decode step failed: {err}"))
        return outs

    def release(self, state: RealtimeState) -> None:
        state.session = None  # its KV cache goes with it
        state.tokens = state.still = None

    def _refine(self, s: RealtimeState) -> StepOutput:
        """One refinement step of ``s``'s active block: ``stream.stream_blocks``'s inner loop body."""
        if s.done or s.session is None:  # the engine closes a request at its last output; never reached
            return StepOutput(codes=self._empty, final=True)
        bk, Q, mask_id = self.block_size, self._empty.shape[0], self.model.mask_id
        if s.step == 0:  # a new block, all masked
            s.tokens = torch.full((1, bk, Q), mask_id, dtype=torch.long)  # (1, B_k, Q)
            s.still = torch.zeros_like(s.tokens, dtype=torch.bool)
        out = s.session.step(s.tokens.expand(s.session.num_rows, -1, -1))  # codes (R, B_k, Q, K), end (R, B_k)
        s.step += 1
        if s.step == 1:
            s.tokens, s.still = s.tokens.to(out.codes.device), s.still.to(out.codes.device)
            # conditional row (CFG is on codes only); no end before the request's floor
            s.end_model = end_frame(out.end[0], self._stream.end_threshold, s.min_frames - s.produced)
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
        final = s.end_model < self.block_size and s.end_model <= room  # end of speech: the engine says "stop"
        if final or s.produced + s.frames >= s.max_frames:
            s.done = True  # at the bound without final: the frames reach max_frames, the engine says "bound"
        else:
            s.session.commit(block.clone())  # immutable context from the next step on
        s.produced += s.frames
        s.blocks += 1
        s.step, s.tokens, s.still = 0, None, None
        return StepOutput(codes=block.T.cpu(), final=final)  # (Q, n) codec layout


def load_luna_realtime_adapter(name_or_dir: str, codec: str | None = None, name: str | None = None,
                               device: str = "cpu") -> LunaRealtimeAdapter:
    """The adapter for a shipped Luna Realtime model (a name such as ``luna-realtime-tiny`` or a directory written by
    ``duet.luna.shipped.save_luna_realtime``); ``codec`` defaults to the codec the checkpoint was trained on."""
    from duet.shipped import resolve_model

    path = resolve_model(name_or_dir)
    speaker = RealtimeSpeaker.from_pretrained(path, codec=codec, device=device)
    return LunaRealtimeAdapter(speaker, RealtimeServeConfig(name=name or path.name))
