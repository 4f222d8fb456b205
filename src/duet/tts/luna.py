"""Luna-TTS as a speaker: text -> sentences -> text ids -> length T (duration predictor) -> MaskGIT -> codec -> audio.

Luna is non-autoregressive: a piece's whole grid is refined at once (S steps over all T frames), so none of it can
be heard before all of it is decoded. ``stream`` therefore yields one chunk per piece of text (a sentence, see
``duet.text.sentences``), with the silent gap between pieces as chunks of their own; the chunks concatenate to
exactly what ``speak`` returns for the same seed (both run the same per-piece generator). Luna-TTS Realtime
(``duet.luna.stream``) is the family member that streams inside a sentence.

Per piece: T = round(sum of the predictor's expected token durations / ``speed``) (``duration.total_frames``;
speed > 1 speaks faster), at most ``max_frames`` and what the model's positions leave after the text (a capped
piece reports "bound", any other "stop": it ends where the model said, ``duet.finish``); the all-mask (1, T, Q) grid is decoded in ``steps`` MaskGIT steps
(32 by default, §2.5; 16 and 8 are the report's faster settings) with CFG on the text; the codec named in the
checkpoint turns the (1, Q, T) codes into audio. Piece i samples with a generator seeded ``seed + i``, so a seed
fixes the whole utterance. Bad input is a DuetError before any decoding: empty text, an unknown voice, steps < 1,
speed <= 0, or a text the predictor gives 0 frames.

Voices: without a prompt the model speaks in whichever voice its text condition draws. Cloning (§2.5, infilling):
``voice_prompt(audio, transcript)`` encodes a reference clip once into a :class:`VoicePrompt`; ``speak(...,
prompt=vp)`` then decodes every piece as ``[transcript + piece | prompt grid | T masked frames]``, the layout
training cuts prompts in (``diffusion.split_prompt`` keeps the whole text). The new piece's length follows the
prompt's pace: T = predicted frames of the piece x ``vp.pace`` / speed, where ``pace`` = the clip's frames / the
predictor's frames for its transcript, clipped to [0.5, 2] (a divergence of ours: the report does not say how it
sets T when cloning).

Editing (§2.5, infilling): ``edit(audio, transcript, (start, end), new_text=...)`` regenerates a stretch of a
recording and keeps the rest's codes (``duet.tts.luna_edit``).

Shape legend: S text ids (with SOT/EOT), T frames, Q codebooks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from duet.errors import DuetError
from duet.finish import BOUND, STOP
from duet.luna.decode import DecodeConfig, maskgit_decode, with_overrides
from duet.luna.duration import fit_durations, total_frames
from duet.luna.infill import check_prompt_audio, check_prompt_grid
from duet.luna.model import LunaInputs
from duet.luna.shipped import LoadedLuna, load_luna
from duet.text.prompts import luna_prompt
from duet.text.sentences import split_sentences
from duet.tts.speech import Speech


def codec_of(loaded: LoadedLuna, codec: str | None, device: str):
    """The codec ``codec`` names, else the one the checkpoint names, else duet-rvq."""
    from duet.codecs import load as load_codec

    return load_codec(codec or loaded.codec.get("name") or "duet-rvq", device=device)


class LunaFamilySpeaker:
    """What both Luna speakers hold: the acoustic model, duration predictor, tokenizer, codec and speak config.

    ``grid`` is the model's ``LunaConfig`` (Q codebooks x K codes); the codec must have exactly that shape.
    """

    voices = ("default",)

    def __init__(self, loaded: LoadedLuna, codec, config, grid) -> None:
        self.model = loaded.bundle.acoustic
        self.duration = loaded.bundle.duration
        self.tokenizer = loaded.tokenizer
        self.codec = codec
        self.config = config
        self.name = loaded.path.name
        self.sample_rate = codec.sample_rate
        want = (grid.codebook_size,) * grid.num_codebooks
        if tuple(codec.codebook_sizes) != want:
            raise DuetError(f"{self.name} needs a codec of {grid.num_codebooks} codebooks x {grid.codebook_size}; "
                            f"{codec} has {tuple(codec.codebook_sizes)}")

    def token_durations(self, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Wrapped text ids -> (the duration predictor's expected frames per token (1, S), lengths (1,))."""
        device = self.duration.head.weight.device
        text = torch.tensor([ids], dtype=torch.long, device=device)  # (1, S)
        lengths = torch.tensor([len(ids)], device=device)  # (1,)
        return self.duration.token_durations(text, lengths), lengths

    def layout(self, ids: list[int], frames: int, prompt_tokens: int = 0, prompt_frames: int = 0,
               ) -> torch.Tensor | None:
        """Frames per wrapped token (1, S) for an aligned model (None for others): the predictor's durations,
        the first ``prompt_tokens`` (SOT and a clone prompt's transcript) scaled to fill the prompt's frames, the
        rest to fill the ``frames`` to generate."""
        if not self.model.config.is_aligned:
            return None
        d = self.token_durations(ids)[0][0]  # (S,)
        n = min(prompt_tokens, d.shape[0] - 1)
        parts = [fit_durations(d[n:], frames)] if n == 0 else [fit_durations(d[:n], prompt_frames),
                                                                fit_durations(d[n:], frames)]
        return torch.cat(parts)[None]  # (1, S)

    def predicted_frames(self, ids: list[int]) -> float:
        """The duration predictor's length for wrapped text ids, in frames (before any speed or rounding)."""
        return float(self.token_durations(ids)[0].sum())


@dataclass(frozen=True)
class LunaSpeakConfig:
    decode: DecodeConfig = DecodeConfig(steps=32)  # steps, temperature, top-k, CFG scale (duet.luna.decode)
    speed: float = 1.0  # > 1 speaks faster: T = predicted frames / speed
    max_chars: int = 200  # longest piece of text per decode
    max_frames: int = 750  # longest piece of audio (30 s at 25 Hz)
    gap_seconds: float = 0.15  # silence between pieces
    language: str = "en"
    max_prompt_seconds: float = 20.0  # longest reference clip for cloning
    pace_range: tuple[float, float] = (0.5, 2.0)  # clip of a prompt's pace (its frames / predicted frames)


@dataclass(frozen=True)
class VoicePrompt:
    """A reference clip ready for cloning: its codec grid, its transcript and its pace (see the module doc)."""

    grid: torch.Tensor  # (P, Q) clean codes
    text: str  # what is said in the clip
    pace: float  # the clip's frames / the duration predictor's frames for ``text``, clipped to ``pace_range``


class LunaSpeaker(LunaFamilySpeaker):
    """A loaded Luna model (acoustic model + duration predictor) with its codec."""

    def __init__(self, loaded: LoadedLuna, codec, config: LunaSpeakConfig = LunaSpeakConfig()):
        super().__init__(loaded, codec, config, loaded.bundle.acoustic.config)

    @classmethod
    def from_pretrained(cls, path: str | Path, codec: str | None = None, device: str = "cpu") -> "LunaSpeaker":
        loaded = load_luna(path, device=device)
        return cls(loaded, codec_of(loaded, codec, device))

    # ---- checks (eager: before any decoding) ------------------------------------------------------------------
    def _check(self, text: str, voice: str | None, steps: int | None, speed: float | None, temperature: float | None,
               top_k: int | None, cfg_scale: float | None) -> tuple[list[str], DecodeConfig, float]:
        if voice is not None and voice not in self.voices:
            raise DuetError(f"unknown voice {voice!r} for {self.name}: {', '.join(self.voices)}")
        decode = with_overrides(self.config.decode, steps=steps, temperature=temperature, top_k=top_k,
                                cfg_scale=cfg_scale)
        speed = self.config.speed if speed is None else speed
        if not (math.isfinite(speed) and speed > 0):
            raise DuetError(f"speed must be a positive number (1 = as predicted, 2 = twice as fast), got {speed}")
        pieces = split_sentences(text, self.config.max_chars)
        if not pieces:
            raise DuetError("the text is empty")
        return pieces, decode, speed

    # ---- one piece --------------------------------------------------------------------------------------------
    def frames_for(self, ids: list[int], speed: float = 1.0, reserved: int = 0) -> tuple[int, str]:
        """-> (T, "stop" or "bound") for wrapped text ids: the predictor's total / speed, capped (``reserved``:
        positions a prompt grid takes besides the text)."""
        durations, lengths = self.token_durations(ids)  # (1, S), (1,)
        if round(float(durations.sum()) / speed) < 1:
            raise DuetError(f"the duration predictor gives this text 0 frames at speed {speed:g}; "
                            "use a lower speed or a longer text")
        frames = int(total_frames(durations, lengths, speed)[0])
        limit = min(self.config.max_frames, self.model.config.backbone.max_positions - len(ids) - reserved)
        if limit < 1:
            raise DuetError(f"the text is too long for {self.name} ({len(ids)} tokens): split it into sentences")
        return (frames, STOP) if frames <= limit else (limit, BOUND)

    def encode_grid(self, audio: np.ndarray, sample_rate: int | None = None) -> torch.Tensor:
        """A checked clip (S,) float32 (resampled from ``sample_rate`` if given) -> its codes as a grid (T, Q) on the
        model's device."""
        with torch.no_grad():
            codes = self.codec.encode(torch.from_numpy(audio)[None], sample_rate=sample_rate).codes[0]  # (Q, T)
        return codes.transpose(0, 1).to(self.model.device)

    def decode_grid(self, grid: torch.Tensor) -> np.ndarray:
        """A grid (T, Q) of codes -> its audio (T x samples per frame,) float32 at the codec's rate."""
        with torch.no_grad():
            audio = self.codec.decode(grid.transpose(0, 1)[None]).audio[0]  # codes (1, Q, T) -> samples
        return audio.float().cpu().numpy()

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
        ids = luna_prompt(text, self.tokenizer, language=self.config.language)
        predicted, _ = self.frames_for(ids)
        low, high = self.config.pace_range
        return VoicePrompt(grid=grid, text=text.strip(), pace=min(high, max(low, grid.shape[0] / predicted)))

    def _piece(self, piece: str, decode: DecodeConfig, speed: float, generator: torch.Generator | None,
               prompt: VoicePrompt | None = None) -> tuple[np.ndarray, str]:
        ids = luna_prompt(piece, self.tokenizer, language=self.config.language)
        cfg, device = self.model.config, self.model.device
        if prompt is None:
            frames, ended = self.frames_for(ids, speed)
            grids = dict(prompt=None, prompt_lengths=None, durations=self.layout(ids, frames))
        else:  # [transcript + piece | prompt | T]: the piece's length at the prompt's pace
            P = prompt.grid.shape[0]
            frames, ended = self.frames_for(ids, speed / prompt.pace, reserved=P)
            # SOT and the transcript's tokens (counted alone) span the prompt; the piece's tokens the new frames
            transcript = len(luna_prompt(prompt.text, self.tokenizer, language=self.config.language)) - 1
            ids = luna_prompt(f"{prompt.text} {piece}", self.tokenizer, language=self.config.language)
            grids = dict(prompt=prompt.grid[None], prompt_lengths=torch.tensor([P], device=device),
                         durations=self.layout(ids, frames, transcript, P))
        empty = torch.full((1, frames, cfg.num_codebooks), cfg.mask_id, dtype=torch.long, device=device)  # (1, T, Q)
        text = torch.tensor([ids], device=device)  # (1, S)
        inputs = LunaInputs(text, torch.tensor([len(ids)], device=device), empty, torch.tensor([frames], device=device),
                            **grids)
        grid = maskgit_decode(self.model.logits_fn(inputs), empty, cfg.mask_id, decode, generator=generator).tokens
        return self.decode_grid(grid[0]), ended

    def _generate(self, pieces: list[str], decode: DecodeConfig, speed: float, seed: int | None,
                  prompt: VoicePrompt | None) -> Iterator[tuple[np.ndarray, str]]:
        for i, piece in enumerate(pieces):
            generator = None if seed is None else torch.Generator().manual_seed(seed + i)
            yield self._piece(piece, decode, speed, generator, prompt)

    # ---- the speaker surface ----------------------------------------------------------------------------------
    def stream(self, text: str, *, voice: str | None = None, seed: int | None = None, steps: int | None = None,
               speed: float | None = None, temperature: float | None = None, top_k: int | None = None,
               cfg_scale: float | None = None, prompt: VoicePrompt | None = None,
               ended: list[str] | None = None) -> Iterator[np.ndarray]:
        """Audio chunks (float32 (s,)): each piece's audio once decoded, with the gaps between pieces as chunks.
        ``ended`` (if given) collects how each piece ended. Input is checked here, not at the first chunk."""
        pieces, decode, speed = self._check(text, voice, steps, speed, temperature, top_k, cfg_scale)
        gap = np.zeros(round(self.config.gap_seconds * self.sample_rate), dtype=np.float32)

        def chunks() -> Iterator[np.ndarray]:
            for i, (audio, how) in enumerate(self._generate(pieces, decode, speed, seed, prompt)):
                if ended is not None:
                    ended.append(how)
                if i:
                    yield gap
                yield audio

        return chunks()

    def speak(self, text: str, *, voice: str | None = None, seed: int | None = None, steps: int | None = None,
              speed: float | None = None, temperature: float | None = None, top_k: int | None = None,
              cfg_scale: float | None = None, prompt: VoicePrompt | None = None) -> Speech:
        """The whole utterance: every piece decoded, joined with ``gap_seconds`` of silence; ``prompt`` clones
        the voice of a :meth:`voice_prompt`."""
        pieces, decode, speed = self._check(text, voice, steps, speed, temperature, top_k, cfg_scale)
        gap = np.zeros(round(self.config.gap_seconds * self.sample_rate), dtype=np.float32)
        audio: list[np.ndarray] = []
        ended: list[str] = []
        for i, (piece_audio, how) in enumerate(self._generate(pieces, decode, speed, seed, prompt)):
            if i:
                audio.append(gap)
            audio.append(piece_audio)
            ended.append(how)
        return Speech(np.concatenate(audio).astype(np.float32), self.sample_rate, tuple(pieces), tuple(ended))

    def edit(self, audio: np.ndarray | torch.Tensor, text: str, span_seconds: tuple[float, float], *,
             new_text: str | None = None, sample_rate: int | None = None, seed: int | None = None,
             steps: int | None = None, temperature: float | None = None, top_k: int | None = None,
             cfg_scale: float | None = None):
        """Speech editing: regenerate ``span_seconds`` of a recording whose transcript is ``text``, under
        ``new_text`` (the whole new transcript) or the same text -> ``duet.tts.luna_edit.EditedSpeech``."""
        from duet.tts.luna_edit import edit_speech

        return edit_speech(self, audio, text, span_seconds, new_text=new_text, sample_rate=sample_rate, seed=seed,
                           steps=steps, temperature=temperature, top_k=top_k, cfg_scale=cfg_scale)
