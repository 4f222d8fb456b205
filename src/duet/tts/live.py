"""Speak text while it is still arriving on a stream (``duet speak --stdin-stream``): typed, or piped from an LLM.

The text is cut into pieces by ``duet.text.segmenter`` (a sentence end, a clause after a few words, the length
bound, or a stall of ``idle_seconds``), and each piece is spoken as soon as it is cut, through the speaker's own
``stream``, with piece i seeded ``seed + i`` and the speaker's gap between pieces: the same pieces, seeds and gaps as
a ``/v1/audio/speech/stream`` session of the same text (``duet.serve.text_stream``). While a piece is spoken, the
text that arrives meanwhile waits in a reader thread, so nothing typed is lost. Word timings (a model that has them)
are collected per piece by the speaker's ``stream`` and placed where the piece's audio starts in what was written.
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
from duet.text.segmenter import SegmenterConfig, TextSegmenter
from duet.tts.speech import silence
from duet.tts.timestamps import WordTiming, shifted


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
    each piece ended (``duet.finish``)."""
    base = seed if seed is not None else random.SystemRandom().randrange(SEED_LIMIT)
    gap = silence(speaker.config.gap_seconds, speaker.sample_rate)
    segmenter = TextSegmenter(config)
    ended: list[str] = []
    written = 0  # samples

    def emit(chunk: np.ndarray) -> None:
        nonlocal written
        write(chunk)
        written += len(chunk)

    def say(pieces: list[str]) -> None:
        for piece in pieces:
            index = len(ended)
            if on_piece is not None:
                on_piece(index, piece)
            if index:
                emit(gap)
            start = written
            piece_ended: list[str] = []
            timed: dict[str, Any] = {} if words is None else {"words": []}
            for chunk in speaker.stream(piece, seed=(base + index) % SEED_LIMIT, ended=piece_ended, **timed,
                                        **options):
                emit(chunk)
            if words is not None:
                words.extend(shifted(timed["words"], start / speaker.sample_rate))
            ended.append("bound" if "bound" in piece_ended else "stop")

    for delta in deltas:
        say(segmenter.poll(clock()) if delta is None else segmenter.push(delta, clock()))
    say(segmenter.finish())
    return ended
