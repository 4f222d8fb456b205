"""A piece's audio retimed after generation, and its word timings moved with it: the one retiming of every path
that drives a family runtime (``duet.tts.speaker.Speaker``: ``duet speak``, ``speak()``, ``--stdin-stream``; the
serving engine, ``duet.serve.engine``: the speech API, its SSE stream, the text-streaming WebSocket). Each feeds
a :class:`Retimer` the piece's decoded audio as it comes and hands on what it gives back, so one model, text and
seed give the same audio and timings on every path.

- speed: the shipped models, trained at their natural pace, follow a layout much faster than it in time but not in
  clarity (gepard-tiny at speed 2: Whisper WER 76%), so a speed outside ``followed_speeds`` is made at the nearest
  speed inside (:func:`made_request`) and the audio time-stretched by the rest at its pitch as it is decoded
  (``duet.tts.wsola``; at speed 2: WER 37%), the piece's words (the model's own alignment) scaled by the same
  factor;
- an SSML break between two words of the piece: the layout puts the pause there, and the quiet stretch the model
  made is then fitted to the break's length in its middle (``duet.tts.pause_fit``). The pause is measured against
  the piece's loudest frame, so such a piece is held until it ends and comes out whole (a piece is a sentence or a
  cut of a text stream: the first audio of a sentence with a break waits for the whole sentence);
- an SSML break between two pieces (a sentence end): whoever joins the pieces sizes the silence between them from
  the quiet measured at the end of the one (:meth:`Retimer.trail`) and at the start of the other
  (:meth:`Retimer.lead`; that piece is held until it ends too), and a break after the text from the quiet at the
  end of the last.

``RetimeConfig.fit_pauses`` off leaves pauses as the layout puts them, sized from word to word (``lead``: the
first word's start, ``trail``: the audio after the last word's end).

Words handed out before the piece ends (:meth:`Retimer.settled`) are those that no later audio can move: read from
the whole layout, unclipped, they end within the audio already out and within the frames already decoded, where
clipping at the end leaves them as they are, so the words of any chunking are the words of the whole piece,
exactly. A held piece hands out none before it ends.

Shape legend: s samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from duet.codecs.base import Codec
from duet.tts.pace_layout import break_gaps
from duet.tts.pause_fit import FittedPause, fit_pauses, quiet_edges, retimed
from duet.tts.request import SynthesisRequest
from duet.tts.timestamps import TextLayout, WordTiming, clipped, piece_words, scaled
from duet.tts.wsola import Wsola


@dataclass(frozen=True)
class RetimeConfig:
    # the speeds a model speaks clearly when its layout is scaled (gepard-tiny, benchmarks/results/timestamps.md:
    # its Whisper WER is 15.8% at 1.25, 34% at 1.5, 76% at 2); a speed outside is made at the nearest of these and
    # time-stretched. Slower speeds are all laid out: stretching sounded worse there and put the words no closer
    followed_speeds: tuple[float, float] = (0.0, 1.25)
    # SSML pauses fitted to their length in the audio (duet.tts.pause_fit): a break between words measured and
    # fitted, one between pieces sized from the quiet measured at their edges; else both as the layout puts them
    fit_pauses: bool = True


def made_request(request: SynthesisRequest, config: RetimeConfig) -> tuple[SynthesisRequest, float]:
    """The request the model makes for ``request`` and the factor its audio is then stretched by: a speed outside
    ``followed_speeds`` is made at the nearest one inside, its SSML breaks laid out that much shorter or longer so
    that they last their length once stretched; else ``request`` itself and 1. Its parameters are left as they are
    (a caller that bounds a request by its frames bounds the made one)."""
    lo, hi = config.followed_speeds
    speed = min(max(request.speed, lo), hi)
    if speed == request.speed:
        return request, 1.0
    factor = speed / request.speed  # > 1: the audio made is stretched longer
    pace = request.pace
    if pace is not None and pace.breaks:
        pace = replace(pace, breaks=tuple((offset, seconds / factor) for offset, seconds in pace.breaks))
    return replace(request, speed=speed, pace=pace), factor


class Retimer:
    """One piece (``request``, made as :func:`made_request` says, its audio stretched ``factor`` times) from its
    decoded audio to the audio and words it is returned with: :meth:`push` each decoded chunk (s,) and hand on what
    comes back, :meth:`finish` once at its end with the layout its steps carried and the frames it produced; then
    :meth:`words`, :meth:`lead` and :meth:`trail`. ``aligned``: the model lays its text out (it has timings)."""

    def __init__(self, request: SynthesisRequest, factor: float, codec: Codec, config: RetimeConfig, aligned: bool):
        self.pace = request.pace
        self.factor = factor
        self.sample_rate = codec.sample_rate
        self.frame_rate = codec.frame_rate
        self.samples_per_frame = codec.samples_per_frame
        self.measure = config.fit_pauses  # pauses sized from the quiet measured in the audio
        pace = self.pace
        self.fit = self.measure and aligned and pace is not None and any(offset > 0 for offset, _ in pace.breaks)
        self.held = self.fit or (self.measure and pace is not None and pace.before > 0)  # comes out whole
        self._stretcher = Wsola(factor, self.sample_rate) if factor != 1.0 else None
        self._parts: list[np.ndarray] = []  # the piece's audio so far (after stretching), when it is measured
        self._decoded = 0  # samples decoded (before stretching)
        self._audio: np.ndarray | None = None  # the whole piece as returned, once finished
        self._made_seconds = 0.0  # its length before any pause was fitted
        self._frames = 0
        self._fits: list[FittedPause] = []
        self._laid: tuple[WordTiming, ...] | None = None
        self._words: tuple[WordTiming, ...] | None = None

    # ---- the audio ----
    def push(self, audio: np.ndarray) -> np.ndarray:
        """A decoded chunk (s,) -> the audio to hand on now (none while the piece is held)."""
        audio = np.asarray(audio, dtype=np.float32)
        self._decoded += len(audio)
        if self._stretcher is not None:
            audio = self._stretcher.push(audio)
        if self.measure:
            self._parts.append(audio)
        return np.zeros(0, np.float32) if self.held else audio

    def finish(self, layout: TextLayout | None, frames: int) -> np.ndarray:
        """The piece has ended after ``frames`` frames (``layout``: how its text lay over them, None for a model
        without one) -> the rest of its audio: the stretch's tail; a held piece whole, its pauses fitted."""
        self._frames = frames
        tail = self._stretcher.flush() if self._stretcher is not None else np.zeros(0, np.float32)
        if not self.measure:
            made = self._decoded if self._stretcher is None else int(round(self._decoded * self.factor))
            self._made_seconds = made / self.sample_rate  # Wsola's output is exactly that long
            return tail
        whole = np.concatenate([*self._parts, tail])
        self._parts = []
        self._made_seconds = len(whole) / self.sample_rate
        if not self.held:
            self._audio = whole
            return tail
        if self.fit and layout is not None:
            assert self.pace is not None  # fit: the piece has breaks
            gaps = [(a * self.factor, b * self.factor, s) for a, b, s in break_gaps(layout, self.pace, self.frame_rate)]
            whole, self._fits = fit_pauses(whole, self.sample_rate, gaps)
        self._audio = whole
        return whole

    # ---- the words ----
    def laid_words(self, layout: TextLayout) -> tuple[WordTiming, ...]:
        """Every word of the layout in seconds of the piece's audio, unclipped, before any pause is fitted."""
        if self._laid is None:
            self._laid = scaled(piece_words(layout, math.inf, self.frame_rate), self.factor)
        return self._laid

    def settled(self, sent: float) -> float:
        """With ``sent`` seconds of the piece's audio out: the time up to which a word of :meth:`laid_words` is
        final (module docstring); -1 while the piece is held."""
        if self.held:
            return -1.0
        frames = float(self._decoded // self.samples_per_frame)
        end = frames / self.frame_rate  # as piece_words clips, then scaled as the words are
        return min(sent, end * self.factor if self.factor != 1.0 else end)

    def words(self, layout: TextLayout) -> tuple[WordTiming, ...]:
        """After :meth:`finish`: the piece's words in seconds of its audio (clipped to what it has, moved with its
        fitted pauses)."""
        if self._words is None:
            words = scaled(piece_words(layout, self._frames, self.frame_rate), self.factor)
            words = clipped(words, self._made_seconds)
            self._words = retimed(words, self._fits, self.seconds) if self._fits else words
        return self._words

    @property
    def seconds(self) -> float:
        """After :meth:`finish`: the length of the piece's audio as returned."""
        if self._audio is not None:
            return len(self._audio) / self.sample_rate
        return self._made_seconds

    def lead(self, layout: TextLayout | None) -> float:
        """Seconds of the piece's audio before its first word: measured quiet once a held piece has finished,
        else the layout's first word's start (0 without a layout)."""
        if self.held and self._audio is not None:
            return quiet_edges(self._audio, self.sample_rate)[0]
        laid = self.laid_words(layout) if layout is not None else ()
        return laid[0].start if laid else 0.0

    def trail(self, layout: TextLayout | None) -> float:
        """After :meth:`finish`: seconds of the piece's audio after its last word: the quiet measured at its end,
        or (pauses not fitted) the audio after the last word's end; 0 without a layout."""
        if self._audio is not None:
            return quiet_edges(self._audio, self.sample_rate)[1]
        words = self.words(layout) if layout is not None else ()
        return self.seconds - words[-1].end if words else 0.0
