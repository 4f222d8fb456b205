"""What both Luna runtimes hold and ask the same way (``duet.tts.luna``, ``duet.tts.luna_realtime``): the acoustic
model, the frozen duration predictor, the tokenizer and the codec, the text as prompt ids, the predictor's
durations, and a request's decoding settings.

Expressive control (Luna-TTS §2.3): a request's emotion becomes the emotion token in the instruction context of its
prompt ids (``duet.text.prompts.luna_prompt``), and its text's inline event tags (``[laughter]``) reach the model as
one service id each. A model takes emotions when its tokenizer has every emotion token and its text embedding has a
row for each (:func:`emotion_support`); otherwise an emotion is refused through the shared check
(``duet.tts.runtime.check_emotion``) with the reason. The tags it reads as events (:func:`readable_tags`) are its
traits' ``tags``, which the web page offers as buttons.

Shape legend: S text ids (with SOT/EOT), T frames, Q codebooks.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch

from duet.errors import DuetError, InvalidRequest
from duet.luna.config import LunaConfig
from duet.luna.decode import DecodeConfig
from duet.luna.duration import DurationPredictor, fit_durations
from duet.luna.grid import check_codec, codes_from_grid, grid_from_codes
from duet.luna.shipped import LoadedLuna
from duet.text.prompts import luna_prompt
from duet.text.tokens import EMOTIONS, NONVERBALS, emotion_token, nonverbal_token, token_id
from duet.tts.request import SynthesisRequest


def codec_of(loaded: LoadedLuna, codec: str | None, device: str):
    """The codec ``codec`` names, else the one the checkpoint names (one inside its directory first), else duet-rvq."""
    from duet.checkpoint_dir import own_codec
    from duet.codecs import load as load_codec

    return load_codec(codec or own_codec(loaded.path, loaded.codec.get("name") or "duet-rvq"), device=device)


def emotion_support(tokenizer: Any, vocab_size: int) -> str | None:
    """None when a model with this tokenizer and ``vocab_size`` text embeddings can take every emotion, else why
    not (the end of the refusal's message)."""
    try:
        ids = [token_id(tokenizer, emotion_token(name)) for name in EMOTIONS]
    except DuetError:
        return ": its tokenizer has no emotion tokens"
    if max(ids) >= vocab_size:
        return f": its text embedding has {vocab_size} rows, fewer than its tokenizer's emotion tokens need"
    return None


def readable_tags(tokenizer: Any, vocab_size: int) -> tuple[str, ...]:
    """The inline event tags (NONVERBALS) whose token this tokenizer has and ``vocab_size`` text embeddings hold:
    what the model reads as an event rather than as the letters of a bracketed word."""
    found = []
    for name in NONVERBALS:
        try:
            if token_id(tokenizer, nonverbal_token(name)) < vocab_size:
                found.append(name)
        except DuetError:
            pass
    return tuple(found)


def request_decode_config(base: DecodeConfig, request: SynthesisRequest) -> DecodeConfig:
    """``base`` (default steps, CFG scale, selection noise) with the request's steps, temperature, top_k and
    cfg_scale. A value DecodeConfig refuses is an InvalidRequest."""
    p = request.params
    try:
        return replace(base, steps=p.steps or base.steps, temperature=p.temperature, top_k=p.top_k,
                       cfg_scale=base.cfg_scale if p.cfg_scale is None else p.cfg_scale)
    except DuetError as err:
        raise InvalidRequest(str(err), param="steps") from err


class LunaParts:
    """A loaded Luna model's pieces. ``grid`` is the model's ``LunaConfig`` (its grid and backbone); the codec must
    be the one the grid reads (``duet.luna.grid``)."""

    def __init__(self, model: Any, duration: DurationPredictor, tokenizer: Any, codec, grid: LunaConfig, name: str,
                 language: str = "en") -> None:
        self.model = model.eval()
        self.duration = duration.eval()
        self.tokenizer = tokenizer
        self.codec = codec
        self.grid = grid
        self.name = name
        self.language = language
        check_codec(grid, tuple(codec.codebook_sizes), f"{name}'s codec {codec}")
        no_emotion = emotion_support(tokenizer, grid.backbone.vocab_size)
        # the FamilyTraits fields of expressive control (an emotion, inline event tags), for the runtimes' traits
        self.emotion_traits: dict[str, Any] = dict(emotions=() if no_emotion else EMOTIONS, emotion_note=no_emotion or "",
                                                   tags=readable_tags(tokenizer, grid.backbone.vocab_size))

    @property
    def sample_rate(self) -> int:
        return self.codec.sample_rate

    def text_ids(self, text: str, emotion: str | None = None) -> list[int]:
        """[SOT, text ids, EOT], or [SOT, emotion, text ids, EOT], prepared as in training."""
        return luna_prompt(text, self.tokenizer, language=self.language, emotion=emotion)

    def request_ids(self, request: SynthesisRequest) -> list[int]:
        """A request's text ids (with its emotion), refused when empty or past the model's positions before the
        duration model runs (its cost grows with the square of the text)."""
        if not request.text.strip():
            raise InvalidRequest("the text is empty", param="input")
        ids = self.text_ids(request.text, request.emotion)
        limit = self.grid.backbone.max_positions
        if len(ids) >= limit:
            raise InvalidRequest(f"the text takes {len(ids)} positions, the model has {limit}; split it into shorter "
                                 "requests", param="input", code="context_length_exceeded")
        return ids

    def token_durations(self, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Wrapped text ids -> (the duration predictor's expected frames per token (1, S), lengths (1,))."""
        device = self.duration.head.weight.device
        text = torch.tensor([ids], dtype=torch.long, device=device)  # (1, S)
        lengths = torch.tensor([len(ids)], device=device)  # (1,)
        return self.duration.token_durations(text, lengths), lengths

    def predicted_frames(self, ids: list[int]) -> float:
        """The duration predictor's length for wrapped text ids, in frames (before any speed or rounding)."""
        return float(self.token_durations(ids)[0].sum())

    def layout(self, ids: list[int], frames: int, prompt_tokens: int = 0, prompt_frames: int = 0,
               durations: torch.Tensor | None = None) -> torch.Tensor | None:
        """Frames per wrapped token (1, S) for an aligned model (None for others): the predictor's durations (or
        ``durations`` (S,), a paced layout of them), the first ``prompt_tokens`` (SOT and a clone prompt's
        transcript) scaled to fill the prompt's frames, the rest to fill the ``frames`` to generate."""
        if not self.grid.is_aligned:
            return None
        d = self.token_durations(ids)[0][0] if durations is None else durations.to(self.duration.head.weight.device)
        n = min(prompt_tokens, d.shape[0] - 1)
        parts = [fit_durations(d[n:], frames)] if n == 0 else [fit_durations(d[:n], prompt_frames),
                                                                fit_durations(d[n:], frames)]
        return torch.cat(parts)[None]  # (1, S)

    def encode_grid(self, audio: np.ndarray, sample_rate: int | None = None) -> torch.Tensor:
        """A checked clip (S,) float32 (resampled from ``sample_rate`` if given) -> its codes as a grid (T, Q) on the
        model's device."""
        with torch.no_grad():
            codes = self.codec.encode(torch.from_numpy(audio)[None], sample_rate=sample_rate).codes[0]  # (Q_c, T)
        return grid_from_codes(self.grid, codes).to(self.duration.head.weight.device)

    def codec_codes(self, grid: torch.Tensor) -> torch.Tensor:
        """A decided grid (T, Q) -> the codec's codes (Q_c, T) on the CPU: what a runtime step hands the engine."""
        return codes_from_grid(self.grid, grid.cpu())

    def no_codes(self) -> torch.Tensor:
        """(Q_c, 0): a step that yields no frame, in the codec's layout."""
        return torch.zeros((len(self.grid.codec_codebook_sizes), 0), dtype=torch.long)

    def decode_grid(self, grid: torch.Tensor) -> np.ndarray:
        """A grid (T, Q) of codes -> its audio (T x samples per frame,) float32 at the codec's rate."""
        with torch.no_grad():
            audio = self.codec.decode(self.codec_codes(grid)[None]).audio[0]  # codes (1, Q_c, T) -> samples
        return audio.float().cpu().numpy()
