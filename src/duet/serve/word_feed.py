"""A served request's word timings as its audio goes out: the speech API's timestamps events and ``json`` body, the
text stream's ``piece.timestamps`` events, and the quiet around its words that sizes an SSML pause before or after
it.

The words are the request's retimer's (``RequestHandle.retimer``, ``duet.tts.retime``: the words ``duet speak``
gives the same piece, after any stretch and fitted pause), read from the layout the request's steps carried, in a
worker thread (a phoneme model runs espeak-ng over the text). A word is handed out once the audio sent holds its
end and no later audio can move it (``Retimer.settled``); when the request ends, the rest come from its finished
retimer. The words handed out, in any chunking, are the words of the whole request, exactly.
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool

from duet.serve.engine import RequestHandle
from duet.tts.timestamps import WordTiming


class WordFeed:
    """The words of one request, handed out in order as its audio is sent (seconds from its first sample)."""

    def __init__(self, handle: RequestHandle):
        self.handle = handle
        self.retimer = handle.retimer
        self._laid: tuple[WordTiming, ...] | None = None
        self._given = 0

    @property
    def timed(self) -> bool:
        """Whether the request has a layout (its first step has run and the model is aligned)."""
        return self.handle.layout is not None

    async def ready(self, seconds: float) -> tuple[WordTiming, ...]:
        """The words not handed out yet that are final within the first ``seconds`` of audio sent."""
        layout = self.handle.layout
        if layout is None or self.retimer.held:
            return ()
        if self._laid is None:
            self._laid = await run_in_threadpool(self.retimer.laid_words, layout)
        until = self.retimer.settled(seconds)
        start = self._given
        while self._given < len(self._laid) and self._laid[self._given].end <= until:
            self._given += 1
        return self._laid[start:self._given]

    async def rest(self) -> tuple[WordTiming, ...]:
        """At the request's end (it stopped or reached its bound): the words not handed out yet."""
        layout = self.handle.layout
        if layout is None:
            return ()
        words = await run_in_threadpool(self.retimer.words, layout)
        out = words[self._given:]
        self._given = len(words)
        return out

    async def lead(self) -> float:
        """Seconds of the request's audio before its first word (``Retimer.lead``; a held request's once it has
        ended)."""
        return await run_in_threadpool(self.retimer.lead, self.handle.layout)

    async def trail(self) -> float:
        """At the request's end: seconds of its audio after its last word (``Retimer.trail``)."""
        return await run_in_threadpool(self.retimer.trail, self.handle.layout)
