"""Speak text while it is still arriving on a stream (``duet speak --stdin-stream``): typed, or piped from an LLM.

The text is cut into pieces by ``duet.text.segmenter`` (a sentence end, a clause after a few words, the length
bound, or a stall of ``idle_seconds``), and each piece is spoken as soon as it is cut, through the speaker's own
``stream``, with piece i seeded ``seed + i`` and the speaker's gap between pieces: the same pieces, seeds and gaps as
a ``/v1/audio/speech/stream`` session of the same text (``duet.serve.text_stream``). While a piece is spoken, the
text that arrives meanwhile waits in a reader thread, so nothing typed is lost. Word timings (a model that has them)
are collected per piece and placed where the piece's audio starts in what was written, by the speaker's own join of
pieces (``Speaker.join_pieces``), which also sizes the silence of an SSML pause between pieces (``duet.tts.pace``).
"""

from __future__ import annotations

import codecs
import os
import queue
import random
import threading
import time
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from duet.limits import SEED_LIMIT
from duet.text.segmenter import SegmenterConfig
from duet.tts.pace import MarkedPieces, Pace, PacedPiece, gap_seconds
from duet.tts.speaker import Chunk
from duet.tts.speech import silence
from duet.tts.timestamps import WordTiming


def read_deltas(fd: int, poll_s: float = 0.05, chunk_bytes: int = 4096) -> Iterator[str | None]:
    """Text from a file descriptor as it arrives: a string for each read, ``None`` after every ``poll_s`` without
    any (so a caller can watch the clock); ends at end of file. UTF-8 split across reads is decoded whole."""
    inbox: queue.Queue[bytes | None] = queue.Queue()

    def read() -> None:
        try:
            while data := os.read(fd, chunk_bytes):
                inbox.put(data)
        finally:
            inbox.put(None)

    threading.Thread(target=read, name="duet-stdin", daemon=True).start()
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while True:
        try:
            data = inbox.get(timeout=poll_s)
        except queue.Empty:
            yield None
            continue
        if data is None:
            rest = decoder.decode(b"", final=True)
            if rest:
                yield rest
            return
        if text := decoder.decode(data):
            yield text


def speak_live(speaker, deltas: Iterable[str | None], write: Callable[[np.ndarray], None], *,
               seed: int | None = None, config: SegmenterConfig = SegmenterConfig(),
               on_piece: Callable[[int, str], None] | None = None,
               clock: Callable[[], float] = time.monotonic, words: list[WordTiming] | None = None,
               **options: Any) -> list[str]:
    """Speak ``deltas`` (text, or None for "nothing new yet") piece by piece as they become ready, passing audio
    chunks to ``write``; ``words`` (if given) collects the words' timings in seconds of what was written. -> how
    each piece ended (``duet.finish``). SSML input (starting with ``<speak>``) is read as it arrives; bad markup
    is an ``SsmlError`` once it is seen."""
    base = seed if seed is not None else random.SystemRandom().randrange(SEED_LIMIT)
    pieces = MarkedPieces(config)
    requests: list = []  # (request, seed) of each piece so far: the speaker's join reads them as they come
    ended: list[str] = []
    trail = 0.0  # seconds of the last piece's audio after its last word (sizes a pause after it)

    def say(cut: list[PacedPiece]) -> Iterator[Chunk]:
        nonlocal trail
        for piece in cut:
            index = len(requests)
            if on_piece is not None:
                on_piece(index, piece.text)
            request = speaker.requests(piece.text, pace=piece.pace or Pace(), seed=(base + index) % SEED_LIMIT,
                                       **options)[0]
            requests.append(request)
            for chunk in speaker.piece_chunks(index, *request, timed=words is not None or pieces.marked):
                if chunk.trail is not None:  # after its last word (duet.tts.retime), as the join reads it
                    trail = chunk.trail
                if chunk.end is not None:
                    ended.append(chunk.end)
                yield chunk

    def chunks() -> Iterator[Chunk]:
        for delta in deltas:
            yield from say(pieces.poll(clock()) if delta is None else pieces.push(delta, clock()))
        yield from say(pieces.finish())

    for audio in speaker.join_pieces(requests, chunks(), words):
        write(audio)
    if pieces.trailing and ended:  # a pause after the last word, marked after the last piece was cut
        write(silence(gap_seconds(pieces.trailing, trail, 0.0), speaker.sample_rate))
    return ended
