"""Gepard as a speaker: text -> sentences -> prompt ids -> frames (``duet.gepard.generate``) -> codec -> audio.

Long text is split at sentence boundaries (``duet.text.sentences``) and each piece is generated on its own, with
``gap_seconds`` of silence between pieces; piece i samples with seed ``seed + i``, so a seed fixes the whole
utterance. ``speed`` (> 1 faster) divides the durations an aligned model predicts for its text
(``duet.gepard.aligned``); a model without aligned input has no durations to scale and refuses it. ``stream`` hands out audio every ``chunk_frames`` frames through the codec's stream decoder; its chunks
concatenate to what ``speak`` (one codec call per piece) returns for the same seed, up to float rounding
(tested).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from duet.codecs.fsq import FSQConfig, GroupFSQ
from duet.errors import DuetError
from duet.gepard.checkpoint import LoadedGepard, load_gepard
from duet.gepard.generate import SPEAK_SAMPLING, STOP, SamplingConfig, stream
from duet.gepard.model import GepardPrompt
from duet.text.prompts import gepard_prompt
from duet.text.sentences import split_sentences
from duet.tts.speech import Speech


@dataclass(frozen=True)
class SpeakConfig:
    sampling: SamplingConfig = SPEAK_SAMPLING
    max_chars: int = 200  # longest piece of text per generation
    gap_seconds: float = 0.15  # silence between pieces
    chunk_frames: int = 4  # frames per streamed push into the codec decoder
    language: str = "en"


class GepardSpeaker:
    """A loaded Gepard model with its codec; one voice until speaker prefixes are trained in."""

    voices = ("default",)

    def __init__(self, loaded: LoadedGepard, codec, config: SpeakConfig = SpeakConfig()):
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.codec = codec
        self.config = config
        self.name = loaded.path.name
        self.sample_rate = codec.sample_rate
        self.fsq = GroupFSQ(FSQConfig())
        if len(codec.codebook_sizes) != self.fsq.config.num_groups:
            raise DuetError(f"{self.name} needs a packed-FSQ codec; {codec} has {len(codec.codebook_sizes)} streams")

    @classmethod
    def from_pretrained(cls, path: str | Path, codec: str | None = None, device: str = "cpu") -> "GepardSpeaker":
        from duet.codecs import load as load_codec

        loaded = load_gepard(path, device=device)
        config = SpeakConfig(sampling=replace(SPEAK_SAMPLING, **loaded.sampling))  # the model's own defaults, if any
        return cls(loaded, load_codec(codec or loaded.codec.get("name") or "duet-fsq", device=device), config)

    def _check(self, text: str, voice: str | None, cfg_scale: float | None = None,
               speed: float | None = None) -> list[str]:
        if voice is not None and voice not in self.voices:
            raise DuetError(f"unknown voice {voice!r} for {self.name}: {', '.join(self.voices)}")
        if speed is not None:
            if not (math.isfinite(speed) and speed > 0):
                raise DuetError(f"speed must be a positive number (1 = as predicted, 2 = twice as fast), got {speed}")
            if not self.model.is_aligned and speed != 1.0:
                raise DuetError(f"{self.name} has no duration predictor (no aligned text input): it decodes until "
                                "it stops, so there is no length to scale")
        if cfg_scale is not None and cfg_scale != 1.0 and self.model.config.text_dropout_prob == 0:
            raise DuetError(f"{self.name} was trained without text dropout, so it has no unconditional path for "
                            "classifier-free guidance (train with duet train gepard --text-dropout 0.1)")
        pieces = split_sentences(text, self.config.max_chars)
        if not pieces:
            raise DuetError("the text is empty")
        return pieces

    def _sampling(self, seed: int | None, piece: int, **overrides) -> SamplingConfig:
        cfg = replace(self.config.sampling, **{k: v for k, v in overrides.items() if v is not None})
        return replace(cfg, seed=None if seed is None else seed + piece)

    def _frames(self, piece: str, sampling: SamplingConfig, speed: float | None = None):
        ids = gepard_prompt(piece, self.tokenizer, language=self.config.language)
        device = self.model.embed_tokens.weight.device
        prompt = GepardPrompt(torch.tensor([ids], dtype=torch.long, device=device), speed=speed or 1.0)  # (1, S)
        uncond = prompt.unconditional() if sampling.cfg_scale != 1.0 else None
        return stream(self.model, prompt, config=sampling, uncond_prompt=uncond, fsq=self.fsq)  # yields (1, G)

    def stream(self, text: str, *, voice: str | None = None, seed: int | None = None,
               temperature: float | None = None, top_k: int | None = None, cfg_scale: float | None = None,
               speed: float | None = None, ended: list[str] | None = None) -> Iterator[np.ndarray]:
        """Audio chunks (float32 (s,)) as frames are decoded; ``ended`` (if given) collects how each piece ended.
        ``cfg_scale`` w != 1 runs two-pass CFG (a model trained with text dropout only). Input is checked here,
        not at the first chunk."""
        pieces = self._check(text, voice, cfg_scale, speed)
        return self._stream(pieces, seed, temperature, top_k, cfg_scale, speed, ended)

    def _stream(self, pieces: list[str], seed: int | None, temperature: float | None, top_k: int | None,
                cfg_scale: float | None, speed: float | None, ended: list[str] | None) -> Iterator[np.ndarray]:
        gap = np.zeros(round(self.config.gap_seconds * self.sample_rate), dtype=np.float32)
        for i, piece in enumerate(pieces):
            if i:
                yield gap
            generation = self._frames(piece, self._sampling(seed, i, temperature=temperature, top_k=top_k,
                                                            cfg_scale=cfg_scale), speed)
            decoder = self.codec.stream_decoder()
            pending: list[torch.Tensor] = []
            for frame in generation:
                pending.append(frame[:, :, None])  # (1, G, 1)
                if len(pending) == self.config.chunk_frames:
                    chunk = decoder.push(torch.cat(pending, dim=-1))[0]
                    pending = []
                    if chunk.numel():
                        yield chunk.numpy()
            rest = [decoder.push(torch.cat(pending, dim=-1))[0]] if pending else []
            rest.append(decoder.flush()[0])
            tail = torch.cat(rest)
            if tail.numel():
                yield tail.numpy()
            if ended is not None:
                ended.append(generation.result.ended[0])

    def speak(self, text: str, *, voice: str | None = None, seed: int | None = None,
              temperature: float | None = None, top_k: int | None = None, cfg_scale: float | None = None,
              speed: float | None = None) -> Speech:
        """The whole utterance at once: each piece's frames decoded in one codec call."""
        pieces = self._check(text, voice, cfg_scale, speed)
        gap = np.zeros(round(self.config.gap_seconds * self.sample_rate), dtype=np.float32)
        audio: list[np.ndarray] = []
        ended: list[str] = []
        for i, piece in enumerate(pieces):
            generation = self._frames(piece, self._sampling(seed, i, temperature=temperature, top_k=top_k,
                                                            cfg_scale=cfg_scale), speed)
            frames = [frame[:, :, None] for frame in generation]  # T x (1, G, 1)
            ended.append(generation.result.ended[0])
            if i:
                audio.append(gap)
            if frames:
                audio.append(self.codec.decode(torch.cat(frames, dim=-1)).audio[0].numpy())
        out = np.concatenate(audio) if audio else np.zeros(0, dtype=np.float32)
        return Speech(out.astype(np.float32), self.sample_rate, tuple(pieces), tuple(ended))


__all__ = ["GepardSpeaker", "SpeakConfig", "STOP"]
