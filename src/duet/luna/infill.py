"""Voice cloning and speech editing as infilling (Luna-TTS report §2.5, "voice cloning and speech editing by
infilling").

The model completes any partly visible grid; the two user-facing tasks are two ways of leaving cells visible:

* cloning: ``[text | prompt grid | T masked frames]``. The prompt grid (the reference clip, encoded by the codec) is a
  clean condition; the target is generated to agree with it. Training cuts the prompt off the same utterance and
  keeps the whole utterance's text (``diffusion.split_prompt``), so ``text_ids`` here should be the prompt's
  transcript followed by the text to speak, and ``frames`` the length of the new part only (the duration predictor's
  sum over the new text's tokens).
* editing: an existing utterance's grid with the span [a, b) masked, denoised under the original or a new text.
  Frames outside the span are visible and come back bit-identical. With a new text the span may change length: it
  becomes ``span_frames`` long (default b - a), and ``edit_span_frames`` estimates it as the old span plus the
  difference between the predicted lengths of the new and the old text (the unedited words are assumed to keep
  their duration), at least 1 frame. The output then has T - (b - a) + span_frames frames; the suffix [b, T) of the
  input becomes [a + span_frames, ...) of the output, unchanged.

Bad input gets a DuetError before any tensor work: an empty or out-of-range span, a prompt grid of zero frames, a
silent prompt clip (``check_prompt_audio``, called where audio is encoded).

Shape legend: S text tokens, P prompt frames, T frames, Q codebooks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from duet.audio import check_audio
from duet.errors import DuetError
from duet.luna.decode import DecodeConfig, maskgit_decode
from duet.luna.model import LunaInputs, LunaModel

SILENCE_DBFS = -60.0  # RMS below this (about 1e-3 of full scale) counts as a silent clip


@dataclass(frozen=True)
class EditResult:
    grid: torch.Tensor  # (T', Q) the edited utterance
    span: tuple[int, int]  # where the regenerated frames lie in ``grid``


def check_prompt_audio(audio: np.ndarray | torch.Tensor, min_rms_dbfs: float = SILENCE_DBFS,
                       what: str = "prompt audio") -> np.ndarray:
    """Refuse a clip that cannot carry a voice: empty, non-finite, or silent (RMS below ``min_rms_dbfs``).

    audio (S,) mono float in [-1, 1] -> the same samples as float32 numpy, for the codec's ``encode``.
    """
    if isinstance(audio, torch.Tensor):
        audio = audio.detach().cpu().numpy()
    audio = np.asarray(audio, dtype=np.float32).reshape(-1)
    check_audio(audio, what)
    rms = float(np.sqrt(np.mean(np.square(audio, dtype=np.float64))))
    level = 20.0 * np.log10(rms) if rms > 0 else float("-inf")
    if level < min_rms_dbfs:
        raise DuetError(
            f"{what} is silent (RMS {level:.1f} dBFS, below {min_rms_dbfs:.0f} dBFS): give a clip with speech"
        )
    return audio


def check_prompt_grid(prompt: torch.Tensor, model: LunaModel) -> None:
    """prompt (P, Q): at least one frame, the model's Q, clean codes 0..K-1."""
    cfg = model.config
    if prompt.dim() != 2 or prompt.shape[1] != cfg.num_codebooks:
        raise DuetError(f"prompt grid must be (frames, {cfg.num_codebooks}), got shape {tuple(prompt.shape)}")
    if prompt.shape[0] == 0:
        raise DuetError("prompt grid has zero frames: the prompt clip is shorter than one codec frame")
    if int(prompt.min()) < 0 or int(prompt.max()) >= cfg.codebook_size:
        raise DuetError(f"prompt codes must lie in 0..{cfg.codebook_size - 1}")


def check_span(span: tuple[int, int], num_frames: int) -> tuple[int, int]:
    """[a, b) must be a non-empty span inside an utterance of ``num_frames`` frames."""
    a, b = int(span[0]), int(span[1])
    if not 0 <= a < b <= num_frames:
        raise DuetError(
            f"editing span [{a}, {b}) must be non-empty and lie inside the utterance's {num_frames} frames"
        )
    return a, b


def edit_span_frames(span: tuple[int, int], old_total: float, new_total: float) -> int:
    """Length of the regenerated span when the text changes: (b - a) + (new_total - old_total), rounded, >= 1.

    ``old_total`` / ``new_total``: predicted frames of the old and the new text (``DurationPredictor``); the same
    text gives back b - a.
    """
    a, b = span
    return max(1, round((b - a) + (new_total - old_total)))


def mask_span(
    grid: torch.Tensor, span: tuple[int, int], span_frames: int, mask_id: int
) -> tuple[torch.Tensor, tuple[int, int]]:
    """grid (T, Q) -> (grid with [a, b) replaced by ``span_frames`` all-mask frames (T', Q), new span (a, a + n))."""
    a, b = check_span(span, grid.shape[0])
    if span_frames <= 0:
        raise DuetError(f"the edited span needs at least 1 frame, got {span_frames}")
    hole = grid.new_full((span_frames, grid.shape[1]), mask_id)  # (n, Q)
    return torch.cat([grid[:a], hole, grid[b:]]), (a, a + span_frames)  # (T', Q)


def infill(
    model: LunaModel,
    text_ids: torch.Tensor,
    tokens: torch.Tensor,
    cfg: DecodeConfig = DecodeConfig(),
    prompt: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    durations: torch.Tensor | None = None,
) -> torch.Tensor:
    """Fill the mask cells of one grid tokens (T, Q) under text_ids (S,) and an optional clean prompt (P, Q);
    ``durations`` (S,): an aligned model's layout of the text over [prompt | grid]."""
    if tokens.dim() != 2 or tokens.shape[0] == 0:
        raise DuetError(f"the grid to fill must be (frames >= 1, Q), got shape {tuple(tokens.shape)}")
    dev = tokens.device
    inputs = LunaInputs(
        text_ids=text_ids.reshape(1, -1),
        text_lengths=torch.tensor([text_ids.numel()], device=dev),
        target=tokens[None],
        target_lengths=torch.tensor([tokens.shape[0]], device=dev),
        prompt=None if prompt is None else prompt[None],
        prompt_lengths=None if prompt is None else torch.tensor([prompt.shape[0]], device=dev),
        durations=None if durations is None else durations.reshape(1, -1).to(dev),
    )
    was_training = model.training
    model.eval()
    try:
        out = maskgit_decode(model.logits_fn(inputs), tokens[None], model.config.mask_id, cfg, generator=generator)
    finally:
        model.train(was_training)
    return out.tokens[0]


def clone(
    model: LunaModel,
    text_ids: torch.Tensor,
    prompt: torch.Tensor,
    frames: int,
    cfg: DecodeConfig = DecodeConfig(),
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Speak ``text_ids`` (prompt transcript + new text, (S,)) in the prompt's voice -> new grid (frames, Q)."""
    check_prompt_grid(prompt, model)
    if frames <= 0:
        raise DuetError(f"the number of frames must be at least 1, got {frames}")
    target = prompt.new_full((frames, model.config.num_codebooks), model.config.mask_id)  # (T, Q)
    return infill(model, text_ids, target, cfg, prompt=prompt, generator=generator)


def edit(
    model: LunaModel,
    text_ids: torch.Tensor,
    grid: torch.Tensor,
    span: tuple[int, int],
    span_frames: int | None = None,
    cfg: DecodeConfig = DecodeConfig(),
    generator: torch.Generator | None = None,
    durations: torch.Tensor | None = None,
) -> EditResult:
    """Regenerate frames [a, b) of grid (T, Q) under text_ids (S,) (the whole utterance's text, original or new);
    ``durations`` (S,): an aligned model's layout of the text over the edited grid."""
    Q, K = model.config.num_codebooks, model.config.codebook_size
    if grid.dim() != 2 or grid.shape[1] != Q:
        raise DuetError(f"grid must be (frames, {Q}), got shape {tuple(grid.shape)}")
    if grid.numel() and (int(grid.min()) < 0 or int(grid.max()) >= K):
        raise DuetError(f"an utterance's grid must be clean codes 0..{K - 1}")
    a, b = check_span(span, grid.shape[0])
    tokens, new_span = mask_span(grid, (a, b), b - a if span_frames is None else span_frames, model.config.mask_id)
    return EditResult(infill(model, text_ids, tokens, cfg, generator=generator, durations=durations), new_span)
