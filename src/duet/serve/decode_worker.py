"""The codec's side of the engine: every stream's decoder on a thread of its own, so that turning one step's frames
into audio runs beside the model's next step instead of after it on the engine thread.

The engine thread ``push``es a stream's frames whenever they make a chunk (``EngineConfig``'s chunk sizes) and
``close``s the stream when it ends; this thread decodes what is queued with the codec's stream decoders, batched
across streams (``duet.codecs.streaming.push_many``: one codec call per group of equal windows), and hands audio and
ends to the engine's callbacks. Per stream, order is kept: its chunks in the order pushed, then its end. Every chunk
goes through its stream's decoder exactly as it was pushed (never merged with the next), so the audio of a seed is
the same whatever runs beside it and however far the codec lags.

Cancellation: ``drop`` takes effect at once (chunks of the stream still queued are skipped), and its ``close`` comes
in order as for any stream. Errors: a codec call that raises fails every stream in that call (their decoders' states
are no longer known): each is reported once (``on_failure``), its later chunks are skipped and its ``close`` carries
the error.

Backpressure: at most ``max_backlog`` messages wait; the engine thread's ``push`` blocks beyond that, so a model that
outruns the codec waits for it instead of piling up undecoded frames.

Shape legend: K code streams of the codec, t frames, s samples.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass
from typing import Callable, Hashable

import numpy as np
import torch

from duet.codecs.streaming import push_many

log = logging.getLogger("duet.serve")

_BATCH_LIMIT = 256  # messages taken off the queue at once (a bound on one pass, not on the batch's codec call)


def lookahead_frames(decoder: object) -> int:
    """Frames a stream decoder holds back before its first audio: a context decoder's right context
    (``ContextStreamDecoder.right``), NanoCodec's ``lookahead``; 0 for one whose every push gives audio (a stateful
    causal decoder, the mock's)."""
    return int(getattr(decoder, "right", getattr(decoder, "lookahead", 0)))


@dataclass(frozen=True)
class _Push:
    key: Hashable
    codes: torch.Tensor  # (K, t)
    flush: bool  # the stream ends with these codes


@dataclass(frozen=True)
class _Close:
    key: Hashable


_STOP = object()


class DecodeWorker:
    """Stream decoders of one codec on their own thread. ``on_audio(key, audio (s,) float32)`` gets each chunk's
    audio (none for a chunk that gives no samples), ``on_close(key, error)`` each stream's end (``error``: the codec
    failure that ended it, else None), ``on_failure(key, error)`` a stream's codec failure as soon as it happens. The
    callbacks run on the worker thread."""

    def __init__(self, codec, on_audio: Callable[[Hashable, np.ndarray], None],
                 on_close: Callable[[Hashable, str | None], None], on_failure: Callable[[Hashable, str], None],
                 max_backlog: int = 256):
        self.codec = codec
        self._on_audio, self._on_close, self._on_failure = on_audio, on_close, on_failure
        self._queue: queue.Queue = queue.Queue(maxsize=max_backlog)
        self._torch_threads: int | None = None
        self._decoders: dict[Hashable, object] = {}  # worker thread only
        self._failed: dict[Hashable, str] = {}  # worker thread only
        self._dropped: set[Hashable] = set()
        self._lock = threading.Lock()  # guards _dropped
        self._thread: threading.Thread | None = None

    # --- the engine thread's side ------------------------------------------------------------------------------

    def start(self, torch_threads: int | None = None) -> None:
        """Start the thread, with ``torch_threads`` intra-op threads (None: torch's default)."""
        if self._thread is None:
            self._torch_threads = torch_threads
            self._thread = threading.Thread(target=self._run, name="duet-codec", daemon=True)
            self._thread.start()

    def push(self, key: Hashable, codes: torch.Tensor, flush: bool = False) -> None:
        """Queue a stream's next chunk, codes (K, t) (t may be 0 with ``flush``); blocks while the backlog is full."""
        self._queue.put(_Push(key, codes, flush))

    def close(self, key: Hashable) -> None:
        """The stream has ended: ``on_close`` after its queued chunks."""
        self._queue.put(_Close(key))

    def drop(self, key: Hashable) -> None:
        """Skip the stream's chunks still queued, at once (it was cancelled or failed); it is closed as any other."""
        with self._lock:
            self._dropped.add(key)

    @property
    def backlog(self) -> int:
        return self._queue.qsize()

    def stop(self, timeout: float = 10.0) -> None:
        """Decode what is queued, then end the thread."""
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join(timeout)
            self._thread = None

    # --- the worker thread -------------------------------------------------------------------------------------

    def _run(self) -> None:
        if self._torch_threads is not None:
            torch.set_num_threads(self._torch_threads)
        while True:
            items = [self._queue.get()]
            while len(items) < _BATCH_LIMIT:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                stopping = self._handle(items)
            except Exception:  # a bug in a callback: keep the thread (and every other stream) alive
                log.exception("codec worker failed")
                stopping = any(item is _STOP for item in items)
            if stopping:
                return

    def _handle(self, items: list) -> bool:
        """Decode and close what ``items`` hold, in order per stream; each stream's chunk at most once per codec
        call. -> whether the worker was told to stop."""
        batch: dict[Hashable, _Push] = {}
        for item in items:
            if item is _STOP:
                self._decode(batch)
                return True
            if item.key in batch:  # its previous chunk goes first
                self._decode(batch)
                batch = {}
            if isinstance(item, _Push):
                with self._lock:
                    skip = item.key in self._dropped
                if not (skip or item.key in self._failed):
                    batch[item.key] = item
            else:
                self._decoders.pop(item.key, None)
                with self._lock:
                    self._dropped.discard(item.key)
                self._on_close(item.key, self._failed.pop(item.key, None))
        self._decode(batch)
        return False

    def _decode(self, batch: dict[Hashable, _Push]) -> None:
        if not batch:
            return
        pushes = list(batch.values())
        decoders = [self._decoder(p.key) for p in pushes]
        try:
            with torch.inference_mode():
                audios = push_many(decoders, [p.codes[None] for p in pushes], [p.flush for p in pushes])  # (1, s)
        except Exception as err:
            log.exception("codec decode failed")
            for p in pushes:
                self._decoders.pop(p.key, None)
                self._failed[p.key] = str(err)
                self._on_failure(p.key, str(err))
            return
        for p, audio in zip(pushes, audios):
            if p.flush:
                self._decoders.pop(p.key, None)  # flushed: the stream is over
            samples = audio[0].detach().cpu().float().numpy()  # (s,)
            if samples.size:
                self._on_audio(p.key, samples)

    def _decoder(self, key: Hashable):
        decoder = self._decoders.get(key)
        if decoder is None:
            decoder = self._decoders[key] = self.codec.stream_decoder()
        return decoder
