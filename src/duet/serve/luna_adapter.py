"""Luna-TTS behind the serving engine: one engine step = one MaskGIT refinement step of every running request.

Luna is non-autoregressive (DESIGN §B): a request's whole (T, Q) grid starts fully masked and is refined in S steps,
so the engine's continuous batching is "batched by refinement step". Each step

1. pads the running requests' texts and grids to the longest (``duet.luna.model.pad_right``) and runs ONE forward
   pass of the acoustic model over all of them, with an unconditional (text-dropped) copy of every row for CFG
   (``LunaModel.logits_fn``: rows [0, B) conditional, [B, 2B) unconditional); the model masks padding and numbers
   positions per row, so a row's logits do not depend on its neighbours (up to float rounding, see below);
2. hands each request its own rows of those logits, cut to its own T, and applies ``duet.luna.decode.maskgit_step``
   with the request's own step index, ``DecodeConfig`` and ``torch.Generator``: the same function, on the same
   shapes, that ``maskgit_decode`` runs for that request alone, so the random numbers a request draws never depend
   on the batch (the engine's determinism contract);
3. returns no frames for a request until its last step; then all T frames at once, in codec layout (Q, T), with
   ``final=True``. Requests at different step indices and with different step counts share a forward pass.

Per request: T = round(sum of the duration predictor's expected token durations / ``speed``)
(``duet.luna.duration.total_frames``, as ``duet.tts.luna.LunaSpeaker``; speed > 1 speaks faster), cut to the
request's ``max_frames`` if it sets one (the grid is then decoded at that length; the engine reports "stop").
An aligned model (``LunaConfig.aligned_window``) lays the text over the grid by the predictor's per-token
durations scaled to T (``duet.luna.duration.fit_durations``), as ``LunaSpeaker`` does.
Sampling: ``steps`` (default ``LunaServeConfig.decode.steps``, 32 as in §2.5), ``temperature`` and ``top_k`` come
from the request's ``SamplingParams``; the CFG scale and the selection noise are the adapter's. ``top_p`` < 1 is
refused (the MaskGIT sampler has no nucleus filter); ``stop_threshold`` does not apply (no stop decision).

Long texts: one request is one grid. Unlike ``LunaSpeaker`` the adapter does not split text into sentences, because
the engine's unit is codes and there is no code for the silent gap the speaker puts between pieces; a text whose
predicted T exceeds ``max_frames`` (30 s by default), or whose text + frames exceed the model's positions, is refused
with ``InvalidRequest`` (code ``context_length_exceeded``) at submission. Clients split long texts themselves.

Voices: only "default" (the voice the text condition draws). Cloning is refused: Luna clones by infilling after a
prompt grid *and its transcript* (``duet.luna.infill``), and the OpenAI speech API has no field for the transcript.

Memory: Luna holds no KV cache. What a running request costs is its share of one step's batched forward output,
``rows x T x Q x K`` logits (rows = 2 with CFG) plus the final hidden states, and its grid state; that is what
``cache_bytes_per_position`` charges per position (text positions are charged at the frame rate, an overestimate).
Not counted: activations inside the backbone (freed layer by layer under ``no_grad``) and the per-row sampling
temporaries of step 2 (a few copies of one request's logits, one request at a time).

Batch invariance, named: padding to the longest text and grid changes the shapes of the forward pass, so a row's
logits can differ from its solo run in the last bits of float32; a sampled token or a confidence ranking can then
differ where two candidates are that close. Tokens are identical in the tests on CPU (``tests/serve/
test_luna_adapter.py``); a solo request reproduces ``maskgit_decode`` of the same seed exactly.

Shape legend: B running requests, S text ids (with SOT/EOT), T frames, Q codebooks, K codes per codebook.
"""

from __future__ import annotations

import math
import threading
import weakref
from dataclasses import dataclass, replace
from typing import Any, Callable, Generic, Sequence, TypeVar

import torch

from duet.codecs.base import Codec
from duet.errors import DuetError
from duet.luna.decode import DecodeConfig, cells_to_generate, maskgit_step
from duet.luna.duration import DurationPredictor, fit_durations, total_frames
from duet.luna.model import LunaInputs, LunaModel, pad_right
from duet.serve.adapter import StepOutput, SynthesisRequest, restoring_generators
from duet.serve.errors import InvalidRequest
from duet.serve.sampling import SamplingParams
from duet.text.prompts import luna_prompt
from duet.tts.luna import LunaSpeakConfig

# --- shared with the Luna Realtime adapter (luna_realtime_adapter.py) ---------------------------------------------


def refuse_unsupported(request: SynthesisRequest, name: str, voices: tuple[str, ...]) -> None:
    """What neither Luna adapter does over this API: cloning, unknown voices, instructions, nucleus sampling."""
    if request.reference is not None:
        raise InvalidRequest(f"{name} cannot clone a voice over this API: Luna clones by infilling after "
                             "the reference and its transcript, and the request has no transcript field",
                             param="reference_audio", code="cloning_unsupported")
    if request.voice is not None and request.voice not in voices:
        raise InvalidRequest(f"unknown voice {request.voice!r}; this model has {', '.join(voices)}",
                             param="voice", code="voice_not_found")
    if request.instructions:
        raise InvalidRequest(f"{name} takes no instructions", param="instructions")
    if request.params.top_p < 1.0:
        raise InvalidRequest(f"{name} samples with temperature and top_k only; top_p must be 1", param="top_p")


def request_decode_config(base: DecodeConfig, request: SynthesisRequest) -> DecodeConfig:
    """``base`` (CFG scale, selection noise, default steps) with the request's steps, temperature and top_k."""
    p = request.params
    try:
        return replace(base, steps=p.steps or base.steps, temperature=p.temperature, top_k=p.top_k)
    except DuetError as err:
        raise InvalidRequest(str(err), param="steps") from err


P = TypeVar("P")


class PerRequest(Generic[P]):
    """A value computed once per request (validate, frame_bound, prompt_positions and prefill all ask for it),
    forgotten with the request. Safe from any thread; two threads may both compute it once, with equal results."""

    def __init__(self) -> None:
        self._values: weakref.WeakKeyDictionary[SynthesisRequest, P] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def get(self, request: SynthesisRequest, compute: Callable[[SynthesisRequest], P]) -> P:
        with self._lock:
            value = self._values.get(request)
        if value is None:
            value = compute(request)
            with self._lock:
                self._values[request] = value
        return value


# --- Luna -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LunaServeConfig:
    name: str = "luna"
    voices: tuple[str, ...] = ("default",)  # no speaker conditioning: the voice the text condition draws
    decode: DecodeConfig = DecodeConfig(steps=32)  # default steps, CFG scale, selection noise (duet.luna.decode)
    max_frames: int = LunaSpeakConfig.max_frames  # one grid's bound (30 s at 25 Hz), as duet.tts.luna
    language: str = LunaSpeakConfig.language


@dataclass(frozen=True)
class _Plan:
    ids: list[int]  # wrapped text ids (S,)
    frames: int  # T predicted for the request's text and speed (before its max_frames)
    durations: torch.Tensor  # (S,) the predictor's expected frames per token


@dataclass(eq=False)
class LunaState:
    request: SynthesisRequest
    ids: list[int]  # (S,)
    durations: torch.Tensor | None  # (S,) frames per token laid over the grid (aligned models), else None
    tokens: torch.Tensor  # (1, T, Q) the grid being refined; mask id at cells not decided yet
    still: torch.Tensor  # (1, T, Q) bool: cells still masked
    num_cells: torch.Tensor  # (1,) N = T Q cells to generate
    decode: DecodeConfig
    generator: torch.Generator
    step: int = 0  # refinement steps done

    @property
    def frames(self) -> int:
        return self.tokens.shape[1]


@dataclass(eq=False)
class LunaAdapter:
    """Implements ``duet.serve.adapter.ModelAdapter`` for a :class:`LunaModel`, its duration predictor and a codec
    of Q codebooks x K codes."""

    model: LunaModel
    duration: DurationPredictor
    tokenizer: Any
    codec: Codec
    config: LunaServeConfig = LunaServeConfig()

    def __post_init__(self) -> None:
        cfg, mcfg = self.config, self.model.config
        want = (mcfg.codebook_size,) * mcfg.num_codebooks
        if tuple(self.codec.codebook_sizes) != want:
            raise DuetError(f"Luna needs a codec of {mcfg.num_codebooks} codebooks x {mcfg.codebook_size}; the codec "
                            f"has {tuple(self.codec.codebook_sizes)}")
        self.model.eval()
        self.duration.eval()
        self.name = cfg.name
        self.voices = cfg.voices
        self.supports_cloning = False
        self.max_frames = min(cfg.max_frames, mcfg.backbone.max_positions - 1)
        self.default_params = SamplingParams(temperature=cfg.decode.temperature, top_k=cfg.decode.top_k)
        self._device = self.model.device
        itemsize = self.model.audio_embed.weight.element_size()
        rows = 2 if cfg.decode.cfg_scale != 1.0 else 1  # CFG: a conditional and an unconditional row per request
        Q, K, D = mcfg.num_codebooks, mcfg.codebook_size, mcfg.backbone.width
        # Per position: its logits and last hidden state in each row, plus the grid state (int64 code + bool mask).
        self.cache_bytes_per_position = rows * (Q * K + D) * itemsize + Q * 9
        self._empty = torch.zeros((Q, 0), dtype=torch.long)  # (Q, 0): no frame this step
        self._plans: PerRequest[_Plan] = PerRequest()

    # --- admission-time questions (any thread) ----------------------------------------------------------------------

    def validate(self, request: SynthesisRequest) -> None:
        refuse_unsupported(request, self.name, self.voices)
        if not (math.isfinite(request.speed) and request.speed > 0):
            raise InvalidRequest(f"speed must be a positive number (1 = as predicted, 2 = twice as fast), got "
                                 f"{request.speed}", param="speed")
        self._decode_config(request)
        plan = self._plan(request)
        frames = self._frames(request, plan)
        if request.params.max_frames is None and plan.frames > self.max_frames:
            raise InvalidRequest(
                f"this text needs {plan.frames} frames, more than the {self.max_frames} one request can hold "
                f"({self.max_frames / self.codec.frame_rate:.0f} s); split it into shorter requests",
                param="input", code="context_length_exceeded")
        limit = self.model.config.backbone.max_positions
        if len(plan.ids) + frames > limit:
            raise InvalidRequest(f"text + frames = {len(plan.ids)} + {frames} positions exceeds the model's {limit}; "
                                 "split the text into shorter requests", param="input", code="context_length_exceeded")

    def frame_bound(self, request: SynthesisRequest) -> int:
        return min(self._plan(request).frames, self.max_frames)

    def prompt_positions(self, request: SynthesisRequest) -> int:
        return len(self._plan(request).ids)

    def _decode_config(self, request: SynthesisRequest) -> DecodeConfig:
        return request_decode_config(self.config.decode, request)

    def _frames(self, request: SynthesisRequest, plan: _Plan) -> int:
        """T of the grid actually decoded: the prediction, cut to the request's ``max_frames``."""
        bound = request.params.max_frames
        return plan.frames if bound is None else min(plan.frames, bound)

    def _plan(self, request: SynthesisRequest) -> _Plan:
        """Text ids and predicted T, computed once per request (validate, frame_bound and prefill all ask)."""
        return self._plans.get(request, self._predict)

    def _predict(self, request: SynthesisRequest) -> _Plan:
        if not request.text.strip():
            raise InvalidRequest("the text is empty", param="input")
        if not (math.isfinite(request.speed) and request.speed > 0):
            raise InvalidRequest(f"speed must be a positive number, got {request.speed}", param="speed")
        ids = luna_prompt(request.text, self.tokenizer, language=self.config.language)
        limit = self.model.config.backbone.max_positions
        if len(ids) >= limit:  # before the duration model, whose cost grows with the square of the text
            raise InvalidRequest(f"the text takes {len(ids)} positions, the model has {limit}; split it into shorter "
                                 "requests", param="input", code="context_length_exceeded")
        text = torch.tensor([ids], dtype=torch.long, device=self._device)  # (1, S)
        lengths = torch.tensor([len(ids)], device=self._device)  # (1,)
        durations = self.duration.token_durations(text, lengths)  # (1, S) expected frames per token
        try:
            frames = int(total_frames(durations, lengths, request.speed)[0])
        except DuetError as err:  # the predictor gives this text 0 frames at this speed
            raise InvalidRequest(f"{err} (at speed {request.speed:g})", param="input") from err
        return _Plan(ids, frames, durations[0])

    # --- the engine thread ------------------------------------------------------------------------------------------

    def prefill(self, requests: Sequence[SynthesisRequest], seeds: Sequence[int]) -> list[LunaState]:
        Q, mask_id = self.model.config.num_codebooks, self.model.config.mask_id
        states = []
        for request, seed in zip(requests, seeds):
            plan = self._plan(request)
            frames = self._frames(request, plan)
            tokens = torch.full((1, frames, Q), mask_id, dtype=torch.long, device=self._device)  # (1, T, Q)
            still = cells_to_generate(tokens, mask_id)  # (1, T, Q), all True
            generator = torch.Generator(device=self._device).manual_seed(seed)
            layout = fit_durations(plan.durations, frames) if self.model.config.is_aligned else None
            states.append(LunaState(request, plan.ids, layout, tokens, still, still.flatten(1).sum(dim=1),
                                    self._decode_config(request), generator))
        return states

    @torch.no_grad()
    def step(self, states: Sequence[LunaState]) -> list[StepOutput]:
        B = len(states)
        with restoring_generators([s.generator for s in states]):  # all or nothing (duet.serve.adapter)
            logits = self._forward(states)  # (B', T_max, Q, K), B' = B or 2B
            updates = []
            for b, s in enumerate(states):
                # This request's rows as maskgit_decode would see them alone: conditional, then unconditional
                # if it guides.
                rows = 1 if s.decode.cfg_scale == 1.0 else 2
                mine = logits[b::B][:rows, : s.frames].contiguous()  # (rows, T, Q, K)
                updates.append(maskgit_step(mine, s.tokens, s.still, s.num_cells, s.step + 1, s.decode,
                                            s.generator))
        outs = []
        for s, (tokens, commit) in zip(states, updates):  # every step succeeded: now the states change
            s.tokens, s.still = tokens, s.still & ~commit
            s.step += 1
            if s.step == s.decode.steps:
                outs.append(StepOutput(codes=s.tokens[0].T.cpu(), final=True))  # (T, Q) -> codec layout (Q, T)
            else:
                outs.append(StepOutput(codes=self._empty))
        return outs

    def release(self, state: LunaState) -> None:
        pass  # nothing pooled: the state's tensors go with it

    def _forward(self, states: Sequence[LunaState]) -> torch.Tensor:
        """One forward pass over every request's current grid -> logits (B', T_max, Q, K)."""
        B, mask_id = len(states), self.model.config.mask_id
        text, text_lengths = pad_right([torch.tensor(s.ids, dtype=torch.long) for s in states], 0)  # (B, S)
        grids, frame_lengths = pad_right([s.tokens[0] for s in states], mask_id)  # (B, T_max, Q)
        durations = None
        if self.model.config.is_aligned:
            durations = pad_right([s.durations for s in states], 0)[0].to(self._device)  # (B, S)
        inputs = LunaInputs(text.to(self._device), text_lengths.to(self._device), grids,
                            frame_lengths.to(self._device), durations=durations)
        conditional = torch.ones(B, dtype=torch.bool, device=self._device)  # (B,)
        if any(s.decode.cfg_scale != 1.0 for s in states):  # unconditional rows for all; unguided rows ignore theirs
            conditional = torch.cat([conditional, torch.zeros_like(conditional)])  # (2B,)
        tokens = grids.repeat(conditional.shape[0] // B, 1, 1)  # (B', T_max, Q)
        return self.model.logits_fn(inputs)(tokens, conditional)


def load_luna_adapter(checkpoint: str, codec: str | None = None, name: str | None = None,
                      device: str = "cpu") -> LunaAdapter:
    """The adapter for a shipped Luna model (a name such as ``luna-tiny`` or a directory written by
    ``duet.luna.shipped.save_luna``); ``codec`` defaults to the codec the checkpoint was trained on."""
    from duet.codecs import load as load_codec
    from duet.luna.shipped import load_luna
    from duet.shipped import resolve_model

    path = resolve_model(checkpoint)
    loaded = load_luna(path, device=device)
    codec_name = codec or loaded.codec.get("name") or "duet-rvq"
    config = LunaServeConfig(name=name or path.name)
    bundle = loaded.bundle
    return LunaAdapter(bundle.acoustic, bundle.duration, loaded.tokenizer, load_codec(codec_name, device=device),
                       config)
