"""A served request's word timings as its audio goes out: the speech API's timestamps events and ``json`` body, the
text stream's ``piece.timestamps`` events, and the silence of an SSML pause after a request.

The words come from the layout the request's steps carried (``RequestHandle.layout``, ``duet.tts.timestamps``),
read once, unclipped, in a worker thread (a phoneme model runs espeak-ng over the text). A word is handed out once
the audio sent holds its end; when the request ends, the rest are clipped to its frames, as ``piece_words`` clips
them for the whole audio. A word handed out early ends before the audio does, so clipping could not have moved it:
the words handed out, in any chunking, are the words of the whole request, exactly.
"""

from __future__ import annotations

import math

from starlette.concurrency import run_in_threadpool

from duet.serve.engine import RequestHandle
from duet.tts.timestamps import WordTiming, clipped, piece_words


class WordFeed:
    """The words of one request, handed out in order as its audio is sent (seconds from its first sample)."""

    def __init__(self, handle: RequestHandle, frame_rate: float):
        self.handle = handle
        self.frame_rate = frame_rate
        self._words: tuple[WordTiming, ...] | None = None
        self._given = 0

    @property
    def timed(self) -> bool:
        """Whether the request has a layout (its first step has run and the model is aligned)."""
        return self.handle.layout is not None

    async def words(self) -> tuple[WordTiming, ...]:
        """Every word of the layout, unclipped (read once)."""
        if self._words is None:
            layout = self.handle.layout
            self._words = () if layout is None else await run_in_threadpool(piece_words, layout, math.inf,
                                                                               self.frame_rate)
        return self._words

    async def ready(self, seconds: float) -> tuple[WordTiming, ...]:
        """The words not handed out yet whose end lies within the first ``seconds`` of audio."""
        words = await self.words()
        start = self._given
        while self._given < len(words) and words[self._given].end <= seconds:
            self._given += 1
        return words[start:self._given]

    async def rest(self, frames: int) -> tuple[WordTiming, ...]:
        """At the end of a request of ``frames`` frames: the words not handed out yet, clipped to its audio."""
        words = await self.words()
        out = clipped(words[self._given:], frames / self.frame_rate)
        self._given = len(words)
        return out

    async def trail(self, frames: int) -> float:
        """Seconds of the request's audio after its last word (0 without words)."""
        words = clipped(await self.words(), frames / self.frame_rate)
        return frames / self.frame_rate - words[-1].end if words else 0.0
