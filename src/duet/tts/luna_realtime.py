"""Luna-TTS Realtime as a speaker: audio block by block, each block handed out the moment it is committed.

Per piece of text (a sentence, ``duet.text.sentences``)::

    text ids --KVBlockSession--> conditions in the KV cache, once                  (duet.luna.stream)
    per block of B_k frames: S MaskGIT steps over the active block only, the end head read at the first step,
        commit (immutable from then on) --codec.stream_decoder().push--> that block's audio, yielded at once
    stop on the learned end of speech ("stop"), or at the piece's bound ("bound")

``chunks`` yields the ``duet.luna.stream.StreamChunk``s (codes and audio) of every piece; ``stream`` yields their
audio as float32 arrays, with ``gap_seconds`` of silence between pieces as chunks of their own; ``speak`` joins the
same chunks, so for one seed ``speak(text).audio`` equals the concatenation of ``stream(text)`` exactly. The causal
RVQ codec decodes frame-synchronously, so the chunks also equal one ``codec.decode`` of the utterance's codes up to
float rounding. Piece i samples with a generator seeded ``seed + i``.

Bound (duet's choice; the report names only "a maximum length as a serving bound"): the piece's frames are capped at
``max_frames``, at what the model's positions leave after the text, and, with ``bound_factor`` set, at
``bound_factor`` x the frozen duration predictor's length + one block, so an end head that never fires cannot run a
short sentence on to 30 s. ``bound_factor=None`` leaves ``max_frames`` alone (the benchmark's fixed-length runs).

Floor (duet's choice too): with ``floor_factor`` set, the end head is not read before ``floor_factor`` x the duration
predictor's length (``StreamConfig.min_frames``), so an end head that fires early cannot cut a sentence short. A small
model needs it: luna-realtime-tiny's end head learned the corpus's typical length more than the text's (on 40
held-out sentences it stopped at 0.55x the recordings' length on average), while the duration predictor, which reads
the text token by token, is off by about 10%. ``floor_factor=None`` lets the end head decide from the first frame.

``steps`` are refinement steps per block (8 by default, the report's deployed setting §5.2); there is no ``speed``:
the model decides where speech ends. One voice (no prompt). Bad input is a DuetError before any decoding.

Shape legend: S text ids (with SOT/EOT), T frames, Q codebooks, B_k frames per block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from duet.errors import DuetError
from duet.luna.decode import with_overrides
from duet.luna.shipped import LoadedLuna, load_luna_realtime
from duet.luna.stream import StreamChunk, StreamConfig, stream_speech
from duet.text.prompts import luna_prompt
from duet.text.sentences import split_sentences
from duet.tts.luna import LunaFamilySpeaker, codec_of
from duet.tts.speech import Speech


@dataclass(frozen=True)
class RealtimeSpeakConfig:
    stream: StreamConfig = StreamConfig()  # steps per block (8), sampling, CFG, end threshold, max_frames (750)
    bound_factor: float | None = 2.0  # cap at bound_factor x predicted frames + one block; None: max_frames only
    floor_factor: float | None = 0.8  # no end before floor_factor x predicted frames; None: the end head alone
    max_chars: int = 200  # longest piece of text per stream
    gap_seconds: float = 0.15  # silence between pieces
    language: str = "en"

    def __post_init__(self) -> None:
        if self.bound_factor is not None and not self.bound_factor > 0:
            raise DuetError(f"bound_factor must be positive or None, got {self.bound_factor}")
        if self.floor_factor is not None and not self.floor_factor >= 0:
            raise DuetError(f"floor_factor must be >= 0 or None, got {self.floor_factor}")


class RealtimeSpeaker(LunaFamilySpeaker):
    """A loaded Luna Realtime model (``LunaRealtime`` + frozen duration predictor) with its causal codec."""

    def __init__(self, loaded: LoadedLuna, codec, config: RealtimeSpeakConfig = RealtimeSpeakConfig()):
        super().__init__(loaded, codec, config, loaded.bundle.acoustic.config.luna)

    @classmethod
    def from_pretrained(cls, path: str | Path, codec: str | None = None, device: str = "cpu",
                        config: RealtimeSpeakConfig = RealtimeSpeakConfig()) -> "RealtimeSpeaker":
        loaded = load_luna_realtime(path, device=device)
        return cls(loaded, codec_of(loaded, codec, device), config)

    @property
    def block_size(self) -> int:
        return self.model.block_size

    def aligned_durations(self, ids: list[int]) -> torch.Tensor | None:
        """An aligned model's layout (S,): the predictor's durations as they are (the end head, not a set length,
        ends the speech); None for other models."""
        return self.token_durations(ids)[0][0] if self.model.config.luna.is_aligned else None

    # ---- checks (eager: before any decoding) ------------------------------------------------------------------
    def _check(self, text: str, voice: str | None, steps: int | None, temperature: float | None,
               top_k: int | None, cfg_scale: float | None) -> tuple[list[str], StreamConfig]:
        if voice is not None and voice not in self.voices:
            raise DuetError(f"unknown voice {voice!r} for {self.name}: {', '.join(self.voices)}")
        stream = self.config.stream
        stream = replace(stream, decode=with_overrides(stream.decode, steps=steps, temperature=temperature,
                                                       top_k=top_k, cfg_scale=cfg_scale))
        pieces = split_sentences(text, self.config.max_chars)
        if not pieces:
            raise DuetError("the text is empty")
        return pieces, stream

    def bound_for(self, ids: list[int], predicted: float | None = None) -> int:
        """The most frames a piece with wrapped text ids may run to (module docstring); ``predicted`` is
        ``predicted_frames(ids)`` when the caller has it already."""
        limit = min(self.config.stream.max_frames, self.model.config.luna.backbone.max_positions - len(ids))
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


    # ---- the stream ---------------------------------------------------------------------------------------------
    def chunks(self, text: str, *, voice: str | None = None, seed: int | None = None, steps: int | None = None,
               temperature: float | None = None, top_k: int | None = None, cfg_scale: float | None = None,
               ended: list[str] | None = None) -> Iterator[StreamChunk]:
        """Every piece's ``StreamChunk``s in order (codes (Q, n) and audio (n x samples per frame,), one per block;
        ``index`` restarts at each piece). ``ended`` collects "stop" or "bound" per piece. Checks input eagerly."""
        pieces, stream = self._check(text, voice, steps, temperature, top_k, cfg_scale)
        device = self.duration.head.weight.device

        def run() -> Iterator[StreamChunk]:
            for i, piece in enumerate(pieces):
                ids = luna_prompt(piece, self.tokenizer, language=self.config.language)
                predicted = self.predicted_frames(ids)  # one duration-predictor pass for bound and floor
                cfg = replace(stream, max_frames=self.bound_for(ids, predicted),
                              min_frames=self.floor_for(ids, predicted))
                generator = None if seed is None else torch.Generator().manual_seed(seed + i)
                text_ids = torch.tensor(ids, dtype=torch.long, device=device)  # (S,)
                layout = self.aligned_durations(ids)
                for chunk in stream_speech(self.model, text_ids, None, cfg, self.codec, generator, layout):
                    if chunk.end is not None and ended is not None:
                        ended.append(chunk.end)
                    yield chunk

        return run()

    def stream(self, text: str, *, voice: str | None = None, seed: int | None = None, steps: int | None = None,
               temperature: float | None = None, top_k: int | None = None, cfg_scale: float | None = None,
               ended: list[str] | None = None) -> Iterator[np.ndarray]:
        """Audio chunks (float32 (s,)): each block's audio as soon as it is committed, the gaps between pieces as
        chunks of their own. Input is checked here, not at the first chunk."""
        chunks = self.chunks(text, voice=voice, seed=seed, steps=steps, temperature=temperature, top_k=top_k,
                             cfg_scale=cfg_scale, ended=ended)
        gap = np.zeros(round(self.config.gap_seconds * self.sample_rate), dtype=np.float32)

        def audio() -> Iterator[np.ndarray]:
            for i, chunk in enumerate(chunks):
                if chunk.index == 0 and i:
                    yield gap
                yield chunk.audio.cpu().numpy().astype(np.float32)

        return audio()

    def speak(self, text: str, *, voice: str | None = None, seed: int | None = None, steps: int | None = None,
              temperature: float | None = None, top_k: int | None = None, cfg_scale: float | None = None) -> Speech:
        """The whole utterance: the same chunks as ``stream``, joined."""
        pieces, _ = self._check(text, voice, steps, temperature, top_k, cfg_scale)
        ended: list[str] = []
        parts = list(self.stream(text, voice=voice, seed=seed, steps=steps, temperature=temperature, top_k=top_k,
                                 cfg_scale=cfg_scale, ended=ended))
        audio = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
        return Speech(audio.astype(np.float32), self.sample_rate, tuple(pieces), tuple(ended))
