"""Luna-TTS's runtime: one step = one MaskGIT refinement step of every running request, for ``duet speak`` and
``duet serve`` alike (``duet.tts.runtime``).

Luna is non-autoregressive (DESIGN §B): a request's whole (T, Q) grid starts fully masked and is refined in S steps,
so batching is "batched by refinement step". Each step

1. pads the running requests' texts, prompts and grids to the longest (``duet.luna.model.pad_right``) and runs ONE
   forward pass of the acoustic model over all of them, with an unconditional (text-dropped) copy of every row for
   CFG (``LunaModel.logits_fn``: rows [0, B) conditional, [B, 2B) unconditional); the model masks padding and numbers
   positions per row, so a row's logits do not depend on its neighbours (up to float rounding, see below);
2. hands each request its own rows of those logits, cut to its own T, and applies ``duet.luna.decode.maskgit_step``
   with the request's own step index, ``DecodeConfig`` and ``torch.Generator``: the same function, on the same
   shapes, that ``maskgit_decode`` runs for that request alone, so the random numbers a request draws never depend
   on the batch;
3. returns no frames for a request until its last step; then all T frames at once, in codec layout (Q, T), with
   ``final=True`` unless T was cut at the request's bound.

Length: T = round(sum of the duration predictor's expected token durations / ``speed``)
(``duet.luna.duration.total_frames``; speed > 1 speaks faster), at most the request's ``max_frames``, the runtime's
``max_frames`` (30 s) and what the model's positions leave after the text (and a prompt). A grid cut short of its
prediction ends at its bound ("bound"), any other ends where the model said ("stop", ``duet.finish``). A request
that sets no ``max_frames`` and whose prediction does not fit is refused (clients split long texts themselves; the
Speaker splits at sentences and sets its bound). An aligned model lays the text over the grid by the predictor's
per-token durations scaled to T (``duet.luna.duration.fit_durations``); that layout goes out with every step of the
request (``StepOutput.layout``, ``duet.tts.timestamps``: word timings). A request's SSML pauses and rates
(``SynthesisRequest.pace``) change those durations (at the request's speed) before T is set from their sum
(``duet.tts.pace_layout``; not with a voice prompt).

Sampling: ``steps`` (default ``LunaRuntimeConfig.decode.steps``, 32 as in §2.5), ``temperature``, ``top_k`` and
``cfg_scale`` come from the request's ``SamplingParams``; the selection noise is the runtime's. ``top_p`` < 1 is
refused (the MaskGIT sampler has no nucleus filter); ``stop_threshold`` does not apply (no stop decision).

Emotion (§2.3): a request's ``emotion`` is the emotion token after SOT (``duet.text.prompts``); the unconditional
CFG rows drop it with the text, so guidance pushes towards the emotion as it does towards the text. With a voice
prompt it sits before the transcript.

Cloning (§2.5, infilling): a request's :class:`VoicePrompt` (``voice_prompt(audio, transcript)`` encodes a clip
once) decodes as ``[transcript + text | prompt grid | T masked frames]``, the layout training cuts prompts in; T
follows the prompt's pace: predicted frames of the text x ``pace`` / speed, ``pace`` = the clip's frames / the
predictor's frames for its transcript, clipped to ``pace_range`` (a divergence of ours: the report does not say how
it sets T when cloning). A raw reference clip (the speech API's field) is refused: Luna needs its transcript too.

Memory: Luna holds no KV cache. What a running request costs is its share of one step's batched forward output,
``rows x T x Q x K`` logits (rows = 2 with CFG) plus the final hidden states, and its grid state; that is what
``cache_bytes_per_position`` charges per position (text positions are charged at the frame rate, an overestimate).

Batch invariance, named: padding to the longest text and grid changes the shapes of the forward pass, so a row's
logits can differ from its solo run in the last bits of float32; a sampled token or a confidence ranking can then
differ where two candidates are that close. Tokens are identical in the tests on CPU; a solo request reproduces
``maskgit_decode`` of the same seed exactly.

Editing (§2.5): ``duet.tts.luna_edit`` regenerates a stretch of a recording with this runtime's parts.

Shape legend: B running requests, S text ids (with SOT/EOT), P prompt frames, T frames, Q codebooks, K codes per
codebook.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from duet.errors import DuetError, InvalidRequest
from duet.luna.decode import DecodeConfig, cells_to_generate, maskgit_step
from duet.luna.duration import DurationPredictor, total_frames
from duet.luna.infill import check_prompt_audio, check_prompt_grid
from duet.luna.model import LunaInputs, LunaModel, pad_right
from duet.sampling import SamplingParams
from duet.tts.luna_parts import LunaParts, codec_of, request_decode_config
from duet.tts.pace_layout import paced_durations
from duet.tts.request import SynthesisRequest, VoicePrompt
from duet.tts.runtime import FamilyTraits, PerRequest, StepCost, StepOutput, restoring_generators
from duet.tts.timestamps import TextLayout


@dataclass(frozen=True)
class LunaRuntimeConfig:
    decode: DecodeConfig = DecodeConfig(steps=32)  # default steps, CFG scale, selection noise (duet.luna.decode)
    max_frames: int = 750  # one grid's bound (30 s at 25 Hz)
    language: str = "en"
    max_prompt_seconds: float = 20.0  # longest reference clip for cloning
    pace_range: tuple[float, float] = (0.5, 2.0)  # clip of a prompt's pace (its frames / predicted frames)


@dataclass(frozen=True)
class _Plan:
    ids: list[int]  # wrapped text ids (S,): the prompt's transcript and the text when cloning
    frames: int  # T predicted for the text and speed (at the prompt's pace), before any bound
    cap: int  # the most frames the model's positions and max_frames leave
    transcript: int  # leading ids that belong to the prompt (SOT and its transcript); 0 without one
    paced: torch.Tensor | None = None  # (S,) frames per token with the request's SSML pace (at its speed), or None


@dataclass(eq=False)
class LunaState:
    request: SynthesisRequest
    ids: list[int]  # (S,)
    prompt: torch.Tensor | None  # (P, Q) clean codes before the grid, or None
    durations: torch.Tensor | None  # (S,) frames per token laid over [prompt | grid] (aligned models), else None
    tokens: torch.Tensor  # (1, T, Q) the grid being refined; mask id at cells not decided yet
    still: torch.Tensor  # (1, T, Q) bool: cells still masked
    num_cells: torch.Tensor  # (1,) N = T Q cells to generate
    decode: DecodeConfig
    generator: torch.Generator
    complete: bool  # T is the whole prediction (not cut at a bound): the last output is final
    layout: TextLayout | None = None  # aligned models: the text over [prompt | grid], on every output
    step: int = 0  # refinement steps done

    @property
    def frames(self) -> int:
        return self.tokens.shape[1]


class LunaRuntime(LunaParts):
    """Implements ``duet.tts.runtime.FamilyRuntime`` for a :class:`LunaModel`, its duration predictor and a codec
    of Q codebooks x K codes."""

    def __init__(self, model: LunaModel, duration: DurationPredictor, tokenizer: Any, codec, name: str = "luna",
                 config: LunaRuntimeConfig = LunaRuntimeConfig()):
        super().__init__(model, duration, tokenizer, codec, model.config, name, config.language)
        self.config = config
        self.traits = FamilyTraits(clone_from_prompt=True, steps=True,
                                   clone_from_audio_note=": Luna clones by infilling after the reference and its "
                                                         "transcript, and the request has no transcript field",
                                   timings=self.grid.is_aligned, **self.emotion_traits)
        mcfg = model.config
        itemsize = model.audio_embed.weight.element_size()
        rows = 2 if config.decode.cfg_scale != 1.0 else 1  # CFG: a conditional and an unconditional row per request
        Q, K, D = mcfg.num_codebooks, mcfg.codebook_size, mcfg.backbone.width
        # Per position: its logits and last hidden state in each row, plus the grid state (int64 code + bool mask).
        self.cache_bytes_per_position = rows * (Q * K + D) * itemsize + Q * 9
        self._device = model.device
        self._empty = self.no_codes()  # (Q_c, 0): no frame this step
        self._plans: PerRequest[_Plan] = PerRequest()

    @property
    def max_frames(self) -> int:
        return min(self.config.max_frames, self.grid.backbone.max_positions - 1)

    @property
    def default_params(self) -> SamplingParams:
        return SamplingParams(temperature=self.config.decode.temperature, top_k=self.config.decode.top_k)

    # --- cloning -----------------------------------------------------------------------------------------------------

    def voice_prompt(self, audio: np.ndarray | torch.Tensor, text: str, sample_rate: int | None = None) -> VoicePrompt:
        """A reference clip (S,) mono float (resampled from ``sample_rate`` if given) and its transcript -> a prompt.

        Refused with a DuetError: an empty transcript, a silent, empty or non-finite clip, a clip longer than
        ``max_prompt_seconds`` or shorter than one codec frame.
        """
        if not text or not text.strip():
            raise DuetError("cloning needs the reference clip's transcript (prompt text); it is empty")
        audio = check_prompt_audio(audio)
        seconds = len(audio) / (sample_rate or self.sample_rate)
        if seconds > self.config.max_prompt_seconds:
            raise DuetError(f"the reference clip is {seconds:.1f} s long; at most {self.config.max_prompt_seconds:g} s")
        grid = self.encode_grid(audio, sample_rate)  # (P, Q)
        check_prompt_grid(grid, self.model)
        ids = self.text_ids(text)
        durations, lengths = self.token_durations(ids)
        predicted = int(total_frames(durations, lengths, 1.0)[0])
        low, high = self.config.pace_range
        return VoicePrompt(grid=grid, text=text.strip(), pace=min(high, max(low, grid.shape[0] / max(predicted, 1))))

    # --- admission-time questions (any thread) ----------------------------------------------------------------------

    def check(self, request: SynthesisRequest) -> None:
        request_decode_config(self.config.decode, request)
        plan = self._plan(request)
        if request.params.max_frames is None and plan.frames > plan.cap:
            raise InvalidRequest(
                f"this text needs {plan.frames} frames, more than the {plan.cap} one request can hold "
                f"({plan.cap / self.codec.frame_rate:.0f} s); split it into shorter requests",
                param="input", code="context_length_exceeded")
        frames = self._frames(request, plan)
        limit = self.grid.backbone.max_positions
        used = len(plan.ids) + self._prompt_frames(request) + frames
        if used > limit:
            raise InvalidRequest(f"text + frames = {used} positions exceeds the model's {limit}; split the text into "
                                 "shorter requests", param="input", code="context_length_exceeded")

    def frame_bound(self, request: SynthesisRequest) -> int:
        plan = self._plan(request)
        return min(plan.frames, plan.cap)

    def prompt_positions(self, request: SynthesisRequest) -> int:
        return len(self._plan(request).ids) + self._prompt_frames(request)

    def step_cost(self, request: SynthesisRequest, frames: int) -> StepCost:
        decode = request_decode_config(self.config.decode, request)
        rows = 1 if decode.cfg_scale == 1.0 else 2
        length = len(self._plan(request).ids) + self._prompt_frames(request) + frames  # [text | prompt | grid]
        return StepCost(decode.steps, rows * length)  # S refinement passes over the whole sequence

    def _prompt_frames(self, request: SynthesisRequest) -> int:
        return 0 if request.prompt is None else request.prompt.grid.shape[0]

    def _frames(self, request: SynthesisRequest, plan: _Plan) -> int:
        """T of the grid actually decoded: the prediction, cut to the request's ``max_frames`` (else the cap)."""
        bound = request.params.max_frames
        return min(plan.frames, plan.cap if bound is None else bound)

    def _plan(self, request: SynthesisRequest) -> _Plan:
        """Text ids, predicted T and the cap, computed once per request text."""
        return self._plans.get(request, self._predict)

    def _predict(self, request: SynthesisRequest) -> _Plan:
        ids, limit = self.request_ids(request), self.grid.backbone.max_positions
        prompt = request.prompt
        speed = request.speed / (prompt.pace if prompt is not None else 1.0)
        durations, lengths = self.token_durations(ids)  # (1, S), (1,)
        if round(float(durations.sum()) / speed) < 1:
            raise InvalidRequest(f"the duration predictor gives this text 0 frames at speed {request.speed:g}; use "
                                 "a lower speed or a longer text", param="input")
        frames = int(total_frames(durations, lengths, speed)[0])
        paced = None
        if request.pace is not None and request.pace.layout and self.grid.is_aligned:
            if prompt is not None:
                raise InvalidRequest("SSML pauses and rates are not laid out with a voice prompt", param="input",
                                     code="ssml_unsupported")
            paced = torch.tensor(paced_durations((durations[0] / speed).tolist(), ids, request.text, request.pace,
                                                 self.tokenizer, self.codec.frame_rate, self.language))
            frames = max(1, round(float(paced.sum())))
        transcript, reserved = 0, 0
        if prompt is not None:  # [transcript + text | prompt | T]: SOT, the emotion and the transcript span the prompt
            transcript = len(self.text_ids(prompt.text, request.emotion)) - 1
            ids = self.text_ids(f"{prompt.text} {request.text}", request.emotion)
            reserved = prompt.grid.shape[0]
        cap = min(self.config.max_frames, limit - len(ids) - reserved)
        if cap < 1:
            raise InvalidRequest(f"the text is too long for {self.name} ({len(ids)} tokens): split it into sentences",
                                 param="input", code="context_length_exceeded")
        return _Plan(ids, frames, cap, transcript, paced)

    # --- the decode thread ------------------------------------------------------------------------------------------

    def prefill(self, requests: Sequence[SynthesisRequest], seeds: Sequence[int]) -> list[LunaState]:
        Q, mask_id = self.grid.num_codebooks, self.grid.mask_id
        states = []
        for request, seed in zip(requests, seeds):
            plan = self._plan(request)
            frames = self._frames(request, plan)
            tokens = torch.full((1, frames, Q), mask_id, dtype=torch.long, device=self._device)  # (1, T, Q)
            still = cells_to_generate(tokens, mask_id)  # (1, T, Q), all True
            generator = torch.Generator(device=self._device).manual_seed(seed)
            prompt = None if request.prompt is None else request.prompt.grid.to(self._device)  # (P, Q)
            layout = self.layout(plan.ids, frames, plan.transcript, 0 if prompt is None else prompt.shape[0],
                                 plan.paced)
            states.append(LunaState(request, plan.ids, prompt, None if layout is None else layout[0], tokens, still,
                                    still.flatten(1).sum(dim=1), request_decode_config(self.config.decode, request),
                                    generator, complete=frames == plan.frames,
                                    layout=None if layout is None else self._text_layout(request, plan, layout[0])))
        return states

    def _text_layout(self, request: SynthesisRequest, plan: _Plan, durations: torch.Tensor) -> TextLayout:
        """durations (S,) over [prompt | grid] -> the request's layout; a prompt's transcript lies before frame 0."""
        prompt = request.prompt
        text = request.text if prompt is None else f"{prompt.text} {request.text}"  # what _predict encodes
        n = min(plan.transcript, durations.shape[0] - 1)  # as LunaParts.layout cuts it
        return TextLayout(text, tuple(plan.ids), tuple(durations.tolist()), self.tokenizer, self.language,
                          offset=float(durations[:n].sum()), prompt_tokens=n)

    @torch.no_grad()
    def step(self, states: Sequence[LunaState]) -> list[StepOutput]:
        B = len(states)
        with restoring_generators([s.generator for s in states]):  # all or nothing (duet.tts.runtime)
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
            if s.step == s.decode.steps:  # (T, Q) -> codec layout (Q_c, T)
                outs.append(StepOutput(codes=self.codec_codes(s.tokens[0]), final=s.complete, layout=s.layout))
            else:
                outs.append(StepOutput(codes=self._empty, layout=s.layout))
        return outs

    def release(self, state: LunaState) -> None:
        pass  # nothing pooled: the state's tensors go with it

    def _forward(self, states: Sequence[LunaState]) -> torch.Tensor:
        """One forward pass over every request's current grid -> logits (B', T_max, Q, K)."""
        B, mask_id = len(states), self.grid.mask_id
        text, text_lengths = pad_right([torch.tensor(s.ids, dtype=torch.long) for s in states], 0)  # (B, S)
        grids, frame_lengths = pad_right([s.tokens[0] for s in states], mask_id)  # (B, T_max, Q)
        prompt = prompt_lengths = durations = None
        if any(s.prompt is not None for s in states):
            empty = grids.new_zeros((0, grids.shape[2]))  # (0, Q)
            prompt, prompt_lengths = pad_right([empty if s.prompt is None else s.prompt for s in states], 0)
            prompt_lengths = prompt_lengths.to(self._device)  # prompt (B, P_max, Q)
        if self.grid.is_aligned:
            durations = pad_right([s.durations for s in states], 0)[0].to(self._device)  # (B, S)
        inputs = LunaInputs(text.to(self._device), text_lengths.to(self._device), grids,
                            frame_lengths.to(self._device), prompt, prompt_lengths, durations)
        conditional = torch.ones(B, dtype=torch.bool, device=self._device)  # (B,)
        if any(s.decode.cfg_scale != 1.0 for s in states):  # unconditional rows for all; unguided rows ignore theirs
            conditional = torch.cat([conditional, torch.zeros_like(conditional)])  # (2B,)
        tokens = grids.repeat(conditional.shape[0] // B, 1, 1)  # (B', T_max, Q)
        return self.model.logits_fn(inputs)(tokens, conditional)


def load_luna_runtime(path: str | Path, codec: str | None = None, device: str = "cpu",
                      name: str | None = None) -> LunaRuntime:
    """The runtime of a shipped Luna directory (``duet.luna.shipped.save_luna``); ``codec`` defaults to the codec
    the checkpoint was trained on."""
    from duet.luna.shipped import load_luna

    loaded = load_luna(path, device=device)
    bundle = loaded.bundle
    config = LunaRuntimeConfig()
    config = replace(config, decode=replace(config.decode, **loaded.decode))  # the model's own defaults, if any
    return LunaRuntime(bundle.acoustic, bundle.duration, loaded.tokenizer, codec_of(loaded, codec, device),
                       name or loaded.path.name, config)
