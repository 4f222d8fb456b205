"""Gepard's sampler: prefill once, then one KV-cached step per frame, 32 channels sampled in parallel.

Pure functions over a :class:`FrameModel` (anything with ``prefill(prompt)`` and ``step(frame, state)`` returning
``FrameLogits`` for the next frame); ``GepardModel`` is one, and the tests drive a scripted fake. No model code
lives here and the model holds no sampling code (STYLE.md, three layers).

One decode step t (t frames emitted so far):

1. logits for frame t; with CFG (``cfg_scale`` w != 1) a second, unconditional pass and
   ``logits = logits_u + w * (logits_c - logits_u)`` on the channel logits (Ho & Salimans 2022). The unconditional
   prompt (``GepardModel.unconditional``) reads ``null_prefix`` in place of the speaker's prefix, text kept, in a
   model with the voice compressor (the report's path, §2.6.2); a model without one, trained with text dropout,
   drops the text instead ([SOT, EOT, SOS]). The stop decision uses the conditional stop logit only: guidance
   shapes what is said, not when the conditional model thinks it is done. (The report serves without CFG, distilled into the weights by DPO, §5-6.)
2. stop: if p_stop = sigmoid(stop logit) > ``stop_threshold`` (0.5, §3.3) the row ends here with t frames
   ("stop"); the frame that would come next is the phantom frame of training (see ``duet.gepard.model``).
3. bound: a row that reaches the frame bound ends there ("bound"): the request's ``max_frames``, else the text's
   ``duet.sampling.FrameBound`` (``min(max_frames, ceil(frames_per_token * text tokens + margin_frames))``, from
   the report's data, §4.1.1), as the serving engine bounds a request.
4. sample the 32 channels independently (factorised, §3.2) with Gepard's one sampler (``duet.gepard.sampling``,
   which the serving engine and the vLLM path call too) and the request's ``duet.sampling.SamplingParams``:
   temperature, then top-k and top-p per channel; temperature 0 is greedy (argmax). Row b draws from its own
   ``torch.Generator`` seeded with ``seed + b``, as the engine seeds a request with its seed: same seed, same
   frames, in ``duet speak`` and ``duet serve`` alike.
5. feed the frame back (``step``), one position in the KV cache.

Rows of a batch stop independently; a row that has ended yields -1 codes from then on, and its length is in the
result. Prompts in one batch must share a length (ragged continuous batching is the serving engine's job).

Shape legend: B batch, C channels (32), G packed groups (8), Lmax = max L_k, T frames.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Protocol

import torch

from duet.codecs.fsq import GroupFSQ
from duet.errors import DuetError
from duet.finish import BOUND, STOP
from duet.gepard.heads import FrameLogits, pad_channels
from duet.gepard.probes import FrameProbes, channel_entropy
from duet.gepard.sampling import sample_requests
from duet.sampling import FrameBound, SamplingParams


class FrameModel(Protocol):
    def prefill(self, prompt: Any) -> tuple[FrameLogits, Any]:
        """Logits (N = 1) for the first frame, and the decode state (a KV cache)."""
        ...

    def step(self, frame: torch.Tensor, state: Any) -> tuple[FrameLogits, Any]:
        """frame (B, C) -> logits (N = 1) for the next frame, and the updated state."""
        ...


# What `duet speak` and `duet serve` sample a Gepard with unless a request says otherwise: cooled and truncated,
# which a small model needs. gepard-tiny on 40 held-out sentences through the engine: WER 201% at temperature 1
# without truncation, 160% at 0.8 / top-k 50, 144% here, with no runaway on 100 one/two-word prompts; colder still
# (0.4 / top-k 10) read better but began to run into the length bound.
SPEAK_SAMPLING = SamplingParams(temperature=0.6, top_k=20)


def guide(cond: torch.Tensor, uncond: torch.Tensor, scale: float) -> torch.Tensor:
    """Classifier-free guidance on logits: ``uncond + scale * (cond - uncond)`` (scale 1 gives ``cond``)."""
    return uncond + scale * (cond - uncond)


@dataclass(frozen=True)
class GenerationResult:
    """How a generation went. ``codes`` (B, C, T) channel codes, -1 past each row's length; ``ended`` per row."""

    codes: torch.Tensor
    lengths: torch.Tensor  # (B,) frames per row
    ended: tuple[str, ...]  # per row: "stop" (stop head fired) or "bound" (hit the frame bound)
    bound: int
    probes: FrameProbes

    def packed(self, fsq: GroupFSQ) -> torch.Tensor:
        """(B, G, T) packed codec tokens, -1 past each row's length."""
        packed = fsq.fold(self.codes.clamp(min=0))  # (B, G, T)
        t = torch.arange(self.codes.shape[-1], device=packed.device)
        return packed.masked_fill((t >= self.lengths[:, None])[:, None, :], -1)


class Generation:
    """An iterator over frames as they are sampled; ``result`` once it is exhausted.

    Yields (B, C) channel codes per step, or (B, G) packed tokens when ``fsq`` is given (for a codec's stream
    decoder). Use :func:`generate` for the whole result at once.
    """

    def __init__(self, model: FrameModel, prompt: Any, *, num_text_tokens: int | None = None,
                 params: SamplingParams = SamplingParams(), bound: FrameBound = FrameBound(),
                 uncond_prompt: Any = None, fsq: GroupFSQ | None = None):
        if num_text_tokens is None:  # a GepardPrompt knows its own text length
            num_text_tokens = prompt.num_text_tokens
        self.cfg_scale = 1.0 if params.cfg_scale is None else params.cfg_scale  # Gepard's default: no guidance
        if self.cfg_scale != 1.0 and uncond_prompt is None:
            raise DuetError("cfg_scale != 1 needs an unconditional prompt (e.g. GepardPrompt.unconditional())")
        self.model = model
        self.prompt = prompt
        self.uncond_prompt = uncond_prompt if self.cfg_scale != 1.0 else None
        self.params = params
        self.fsq = fsq
        self.bound = params.max_frames or bound.frames(num_text_tokens)
        self._result: GenerationResult | None = None
        self._started = False

    @property
    def result(self) -> GenerationResult:
        if self._result is None:
            raise DuetError("the generation has not finished: iterate it to the end first")
        return self._result

    def __iter__(self) -> Iterator[torch.Tensor]:
        if self._started:
            raise DuetError("a Generation can be iterated once")
        self._started = True
        return self._run()

    def _run(self) -> Iterator[torch.Tensor]:
        params = self.params
        # Gradients are switched off around model calls only: a `with no_grad()` around a `yield` would leak into
        # the caller's code between frames.
        with torch.no_grad():
            cond, state_c = self.model.prefill(self.prompt)
            uncond, state_u = (self.model.prefill(self.uncond_prompt) if self.uncond_prompt is not None
                               else (None, None))
        levels = cond.levels
        b, device = cond.codes.shape[0], cond.codes.device
        generators = [None if params.seed is None else torch.Generator(device=device).manual_seed(params.seed + row)
                      for row in range(b)]

        alive = torch.ones(b, dtype=torch.bool, device=device)
        lengths = torch.zeros(b, dtype=torch.long, device=device)
        ended: list[str | None] = [None] * b
        frames: list[torch.Tensor] = []
        entropies: list[torch.Tensor] = []
        stop_probs: list[torch.Tensor] = []
        t = 0
        while True:
            flat = cond.codes[:, -1].float()  # (B, 216)
            if uncond is not None:
                flat = guide(flat, uncond.codes[:, -1].float(), self.cfg_scale)
            logits = pad_channels(flat, levels)  # (B, C, Lmax)
            p_stop = torch.sigmoid(cond.stop[:, -1].float())  # (B,)
            nan = torch.tensor(float("nan"), device=device)
            entropies.append(torch.where(alive[:, None], channel_entropy(logits), nan))  # (B, C)
            stop_probs.append(torch.where(alive, p_stop, nan))  # (B,)

            for row in torch.nonzero(alive & (p_stop > params.stop_threshold)).flatten().tolist():
                ended[row], alive[row], lengths[row] = STOP, False, t
            if t >= self.bound:
                for row in torch.nonzero(alive).flatten().tolist():
                    ended[row], alive[row], lengths[row] = BOUND, False, t
            if not bool(alive.any()):
                break

            frame = sample_requests(logits, [params] * b, generators)
            frame = frame.masked_fill(~alive[:, None], -1)  # (B, C); ended rows carry -1
            frames.append(frame)
            t += 1
            if self.fsq is not None:
                packed = self.fsq.fold(frame.clamp(min=0)[:, :, None])[:, :, 0]  # (B, G)
                yield packed.masked_fill(~alive[:, None], -1)
            else:
                yield frame
            fed = frame.clamp(min=0)  # ended rows are fed a dummy frame; their outputs are never read
            with torch.no_grad():
                cond, state_c = self.model.step(fed, state_c)
                if uncond is not None:
                    uncond, state_u = self.model.step(fed, state_u)

        c = len(levels)
        codes = torch.stack(frames, dim=-1) if frames else torch.empty((b, c, 0), dtype=torch.long, device=device)
        self._result = GenerationResult(
            codes=codes,  # (B, C, T)
            lengths=lengths,
            ended=tuple(e for e in ended if e is not None),
            bound=self.bound,
            probes=FrameProbes(entropy=torch.stack(entropies, dim=1), stop_prob=torch.stack(stop_probs, dim=1)),
        )


def stream(model: FrameModel, prompt: Any, *, num_text_tokens: int | None = None,
           params: SamplingParams = SamplingParams(), bound: FrameBound = FrameBound(), uncond_prompt: Any = None,
           fsq: GroupFSQ | None = None) -> Generation:
    """Frames as they come: ``for frame in (g := stream(...)): ...``, then ``g.result``."""
    return Generation(model, prompt, num_text_tokens=num_text_tokens, params=params, bound=bound,
                      uncond_prompt=uncond_prompt, fsq=fsq)


def generate(model: FrameModel, prompt: Any, *, num_text_tokens: int | None = None,
             params: SamplingParams = SamplingParams(), bound: FrameBound = FrameBound(),
             uncond_prompt: Any = None) -> GenerationResult:
    """Run a generation to its end and return the result."""
    gen = stream(model, prompt, num_text_tokens=num_text_tokens, params=params, bound=bound,
                 uncond_prompt=uncond_prompt)
    for _ in gen:
        pass
    return gen.result
