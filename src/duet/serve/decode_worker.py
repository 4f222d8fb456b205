"""The codec's side of the engine: every stream's decoder on a thread of its own, so that turning one step's frames
into audio runs beside the model's next step instead of after it on the engine thread.

The engine thread ``push``es a stream's frames whenever they make a chunk (``EngineConfig``'s chunk sizes) and
``close``s the stream when it ends; this thread decodes what is queued with the codec's stream decoders, batched
across streams (``duet.codecs.streaming.push_many``: one codec call per group of equal context windows, or of a
causal decoder's chunks padded to a common length), and hands audio and ends to the engine's callbacks. What the
engine thread pushes and closes inside one ``tick`` (one model step) is queued as one message, so the codec thread
takes a step's chunks together, in one batched call, instead of waking at the first and decoding it alone. Per
stream, order is kept: its chunks in the order pushed, then its end. Every chunk goes through its stream's decoder
as it was pushed (never merged with the next), so the audio of a seed does not depend on what runs beside it or on
how far the codec lags, up to float rounding (a batched call's kernels over another batch shape; the tests hold it
to 1e-5).

Cancellation: ``drop`` takes effect at once (chunks of the stream still queued are skipped), and its ``close`` comes
in order as for any stream. Errors: a codec call that raises fails every stream in that call (their decoders' states
are no longer known): each is reported once (``on_failure``), its later chunks are skipped and its ``close`` carries
the error.

Backpressure: at most ``max_backlog`` chunks and closes wait (a tick with more waits for an empty backlog); the
engine thread's ``push`` (or its tick's end) blocks beyond that, so a model that outruns the codec waits for it
instead of piling up undecoded frames.

Shape legend: K code streams of the codec, t frames, s samples.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Hashable, Iterator

import numpy as np
import torch

from duet.codecs.streaming import push_many

log = logging.getLogger("duet.serve")

_BATCH_LIMIT = 256  # items taken off the backlog at once (a bound on one pass, not on the batch's codec call)


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


class _Backlog:
    """A FIFO of messages (lists of items) bounded by the items it holds; thread-safe."""

    def __init__(self, bound: int):
        self._messages: deque[list] = deque()
        self._items = 0
        self._bound = bound
        self._cond = threading.Condition()

    def put(self, items: list) -> None:
        """Queue one message; waits while it would take the backlog past its bound (a message larger than the
        bound waits for an empty backlog)."""
        with self._cond:
            self._cond.wait_for(lambda: self._items == 0 or self._items + len(items) <= self._bound)
            self._messages.append(items)
            self._items += len(items)
            self._cond.notify_all()

    def take(self, limit: int) -> list:
        """Wait for a message, then take whole messages in order while their items stay within ``limit`` (at
        least one message) -> their items, in order."""
        with self._cond:
            self._cond.wait_for(lambda: bool(self._messages))
            items: list = []
            while self._messages and (not items or len(items) + len(self._messages[0]) <= limit):
                message = self._messages.popleft()
                items.extend(message)
                self._items -= len(message)
            self._cond.notify_all()
            return items

    def __len__(self) -> int:
        return self._items


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
        self._backlog = _Backlog(max_backlog)
        self._gathered: list | None = None  # the open tick's items (engine thread only)
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
        """Queue a stream's next chunk, codes (K, t) (t may be 0 with ``flush``); blocks while the backlog is full
        (inside a tick: gathered, queued at its end)."""
        self._queue(_Push(key, codes, flush))

    def close(self, key: Hashable) -> None:
        """The stream has ended: ``on_close`` after its queued chunks."""
        self._queue(_Close(key))

    @contextmanager
    def tick(self) -> Iterator[None]:
        """Gather the pushes and closes made inside the block and queue them as one message at its end (blocking
        while the backlog is full), so that the codec thread decodes them together."""
        if self._gathered is not None:  # nested: the outer tick queues them
            yield
            return
        self._gathered = []
        try:
            yield
        finally:
            items, self._gathered = self._gathered, None
            if items:
                self._backlog.put(items)

    def _queue(self, item: _Push | _Close) -> None:
        if self._gathered is not None:
            self._gathered.append(item)
        else:
            self._backlog.put([item])

    def drop(self, key: Hashable) -> None:
        """Skip the stream's chunks still queued, at once (it was cancelled or failed); it is closed as any other."""
        with self._lock:
            self._dropped.add(key)

    @property
    def backlog(self) -> int:
        """Chunks and closes queued, not yet taken by the codec thread."""
        return len(self._backlog)

    def stop(self, timeout: float = 10.0) -> None:
        """Decode what is queued, then end the thread."""
        if self._thread is not None:
            self._backlog.put([_STOP])
            self._thread.join(timeout)
            self._thread = None

    # --- the worker thread -------------------------------------------------------------------------------------

    def _run(self) -> None:
        if self._torch_threads is not None:
            torch.set_num_threads(self._torch_threads)
        while True:
            items = self._backlog.take(_BATCH_LIMIT)
            try:
                stopping = self._handle(items)
            except Exception:  # a bug in a callback: keep the thread (and every other stream) alive
                log.exception("codec worker failed")
                stopping = any(item is _STOP for item in items)
            if stopping:
                return

    def _handle(self, items: list) -> bool:
        """Decode and close what ``items`` hold, in order per stream; each stream's chunk at most once per codec
        call, and a stream's end after its last chunk's call (the other streams' chunks after it in ``items`` still
        share that call). -> whether the worker was told to stop."""
        batch: dict[Hashable, _Push] = {}
        ending: list[Hashable] = []  # streams whose end waits for their chunk in ``batch``
        for item in items:
            if item is _STOP:
                self._decode(batch, ending)
                return True
            if item.key in batch and (isinstance(item, _Push) or item.key in ending):  # its previous chunk first
                self._decode(batch, ending)
                batch, ending = {}, []
            if isinstance(item, _Push):
                with self._lock:
                    skip = item.key in self._dropped
                if not (skip or item.key in self._failed):
                    batch[item.key] = item
            elif item.key in batch:
                ending.append(item.key)
            else:
                self._end(item.key)
        self._decode(batch, ending)
        return False

    def _end(self, key: Hashable) -> None:
        self._decoders.pop(key, None)
        with self._lock:
            self._dropped.discard(key)
        self._on_close(key, self._failed.pop(key, None))

    def _decode(self, batch: dict[Hashable, _Push], ending: list[Hashable]) -> None:
        """One ``push_many`` over the batch's chunks, then the ends of ``ending``."""
        if batch:
            self._push_many(list(batch.values()))
        for key in ending:
            self._end(key)

    def _push_many(self, pushes: list[_Push]) -> None:
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
