"""The serving engine: one background thread running continuous batching over a model adapter.

Every iteration of the engine thread (one *step*):
1. drops cancelled requests (their slot, cache reservation and adapter state are freed here);
2. admits queued requests while slots and the cache budget allow (``scheduler.py``) and prefills them;
3. advances every running request by one step through the adapter (``adapter.py``), so requests join and
   leave the batch at any step, each with its own sampling parameters, seed, cache and length bound;
4. hands the new frames of each request to its own codec stream decoder and the audio to its consumer; the
   stream decoders of one step share batched codec calls (``duet.codecs.streaming.push_many``).

A request ends with one of four reasons: ``stop`` (the model's stop probability exceeded the request's
threshold, or a non-AR adapter said ``final``), ``bound`` (its ``max_frames`` was reached), ``cancelled``
(the consumer called ``cancel`` or dropped its iterator, e.g. an HTTP client disconnected) and ``error``
(the adapter or codec raised, or the request ran past its time budget; the engine fails the affected requests
and keeps serving).

Time budget: a request may take ``time_budget_s`` + ``time_budget_per_audio_s`` x the seconds of audio its frame
bound allows, from submission (queueing included), so a slow client of the batch, an overloaded server or a model
that refines too long cannot hold a slot for ever; past it the request ends as ``error`` with code ``timeout``.

Consumers get a :class:`RequestHandle`: an async iterator of audio chunks (mono float32 numpy arrays at the
codec's sample rate) for asyncio code, or ``collect()`` for blocking code. Model and codec calls happen on the
engine thread only; ``submit`` and ``cancel`` are safe from any thread.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Iterator

import numpy as np
import torch

from duet.codecs.streaming import push_many
from duet.errors import DuetError
from duet.finish import REASONS
from duet.serve.adapter import ModelAdapter, StepOutput, SynthesisRequest
from duet.serve.errors import EngineClosed, GenerationFailed, InvalidRequest
from duet.serve.kv_budget import reservation_bytes
from duet.serve.scheduler import Scheduler, SchedulerConfig
from duet.tts.runtime import settle

log = logging.getLogger("duet.serve")

FINISH_REASONS = REASONS  # duet.finish


@dataclass(frozen=True)
class EngineConfig:
    scheduler: SchedulerConfig = SchedulerConfig()
    # Frames gathered before they go through the stream decoder: ``chunk_frames`` until a request's first audio
    # (1 = lowest latency), then doubling after each chunk up to ``max_chunk_frames``. A codec with context
    # re-decodes its left and right context with every chunk (duet-fsq: 38 frames), so one-frame chunks cost
    # about 39 frames of decoding each; 16-frame chunks cost 3.4 each, and the player has 0.7 s of audio in hand
    # by the time the first 16-frame chunk is due.
    chunk_frames: int = 1
    max_chunk_frames: int = 16
    # torch intra-op threads of the engine thread (None: torch's default). On CPU, 1 is often fastest: measured
    # on 2 cores, a gepard-tiny step from a non-main thread took 9.3 ms with 2 threads and 4.4 ms with 1.
    torch_threads: int | None = None
    # Wall-clock budget of one request (module doc): generous for one stream (gepard-tiny makes audio several
    # times faster than real time on one core), short of for ever for a stuck one.
    time_budget_s: float = 60.0
    time_budget_per_audio_s: float = 10.0

    def __post_init__(self) -> None:
        if not (self.time_budget_s > 0 and self.time_budget_per_audio_s >= 0):
            raise DuetError(f"need time_budget_s > 0 and time_budget_per_audio_s >= 0, got {self.time_budget_s} "
                            f"and {self.time_budget_per_audio_s}")
        if not 1 <= self.chunk_frames <= self.max_chunk_frames:
            raise DuetError(f"need 1 <= chunk_frames <= max_chunk_frames, got {self.chunk_frames} and "
                             f"{self.max_chunk_frames}")
        if self.torch_threads is not None and self.torch_threads < 1:
            raise DuetError(f"torch_threads must be >= 1, got {self.torch_threads}")


@dataclass(frozen=True)
class FinishInfo:
    reason: str  # one of FINISH_REASONS
    frames: int  # frames emitted
    samples: int  # audio samples emitted
    prompt_positions: int
    wall_s: float  # submit -> finish
    error: str | None = None
    code: str | None = None  # an error's kind: "timeout" (the time budget ran out), else None


@dataclass(frozen=True)
class EngineStats:
    alive: bool
    running: int
    waiting: int
    cache_bytes_used: int
    cache_bytes_total: int
    steps: int
    frames: int
    finished: dict[str, int]


class _Outbox:
    """Thread-safe FIFO from the engine thread to one consumer, awaitable from the consumer's event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None):
        self._items: deque[Any] = deque()
        self._cond = threading.Condition()
        self._loop = loop
        self._event = asyncio.Event() if loop is not None else None

    def put(self, item: Any) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify_all()
        if self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._event.set)  # type: ignore[union-attr]
            except RuntimeError:  # the consumer's loop is closed: nobody is listening any more
                pass

    async def get_async(self) -> Any:
        if self._event is None:
            raise RuntimeError("submit() was called outside an event loop; use collect() / iteration instead")
        while True:
            self._event.clear()  # clear before looking, so a put after the look still wakes us
            with self._cond:
                if self._items:
                    return self._items.popleft()
            await self._event.wait()

    def get(self, timeout: float | None) -> Any:
        with self._cond:
            if not self._cond.wait_for(lambda: bool(self._items), timeout):
                raise TimeoutError(f"no output from the engine within {timeout} s")
            return self._items.popleft()


@dataclass(frozen=True)
class Admission:
    """A request checked for admission (``Engine.admit``): its frame bound, prompt positions and cache bytes."""

    request: SynthesisRequest
    max_frames: int
    prompt_positions: int
    cache_bytes: int


class RequestHandle:
    """A submitted request: iterate it for audio chunks, ``cancel`` it, read ``finish`` once it has ended."""

    def __init__(self, engine: "Engine", request: SynthesisRequest, seed: int, prompt_positions: int,
                 loop: asyncio.AbstractEventLoop | None):
        self.id = uuid.uuid4().hex
        self.request = request
        self.seed = seed
        self.prompt_positions = prompt_positions
        self.submitted_at = time.perf_counter()
        self.first_audio_at: float | None = None
        self.finish: FinishInfo | None = None
        self._engine = engine
        self._outbox = _Outbox(loop)
        self._slot: _Slot | None = None

    def cancel(self) -> None:
        """Ask the engine to drop this request; its slot and cache are freed at the next step. Idempotent."""
        self._engine._request_cancel(self)

    def __aiter__(self) -> AsyncIterator[np.ndarray]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[np.ndarray]:
        try:
            while True:
                item = await self._outbox.get_async()
                if isinstance(item, FinishInfo):
                    if item.reason == "error":
                        raise GenerationFailed(item.error or "generation failed", item.code)
                    return
                yield item
        finally:  # the consumer stopped listening (disconnect, exception, break): free the slot
            self.cancel()

    def __iter__(self) -> Iterator[np.ndarray]:
        return self._chunks_blocking(timeout=None)

    def _chunks_blocking(self, timeout: float | None) -> Iterator[np.ndarray]:
        try:
            while True:
                item = self._outbox.get(timeout)
                if isinstance(item, FinishInfo):
                    if item.reason == "error":
                        raise GenerationFailed(item.error or "generation failed", item.code)
                    return
                yield item
        finally:
            self.cancel()

    def collect(self, timeout: float | None = 60.0) -> tuple[np.ndarray, FinishInfo]:
        """Block until the request ends: (all audio (S,) float32, finish info)."""
        chunks = list(self._chunks_blocking(timeout))
        audio = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
        assert self.finish is not None
        return audio, self.finish


@dataclass(eq=False)  # identity semantics: the scheduler looks slots up with `in`
class _Slot:
    handle: RequestHandle
    max_frames: int
    cache_bytes: int
    deadline: float  # perf_counter time its budget runs out
    state: Any = None
    decoder: Any = None
    frames: int = 0
    samples: int = 0
    pending: list[torch.Tensor] = field(default_factory=list)  # (K, t) codes not yet decoded
    chunk: int = 1  # frames the next chunk waits for (EngineConfig: grows after each chunk of audio)
    done: bool = False


class Engine:
    def __init__(self, adapter: ModelAdapter, config: EngineConfig = EngineConfig()):
        self.adapter = adapter
        self.config = config
        self._scheduler: Scheduler[_Slot] = Scheduler(config.scheduler)
        self._cond = threading.Condition()
        self._cancels: list[_Slot] = []
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._steps = 0
        self._frames = 0
        self._finished: Counter[str] = Counter()

    @property
    def sample_rate(self) -> int:
        return self.adapter.codec.sample_rate

    # --- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> "Engine":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="duet-engine", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread; requests still queued or running end as ``cancelled``."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> "Engine":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stopping

    # --- requests ----------------------------------------------------------------------------------------------

    def admit(self, request: SynthesisRequest) -> Admission:
        """What a request will cost, checked before it is queued: text preparation (number expansion, phonemes, a
        duration model) runs here, so a server calls it from a worker thread, off its event loop. Raises
        InvalidRequest for a request that can never run."""
        self.adapter.validate(request)
        cap = self.adapter.max_frames
        max_frames = request.params.max_frames or self.adapter.frame_bound(request)
        if max_frames > cap:
            raise InvalidRequest(f"max_frames {max_frames} exceeds this model's bound of {cap}", param="max_frames")
        prompt = self.adapter.prompt_positions(request)
        nbytes = reservation_bytes(prompt, max_frames, self.adapter.cache_bytes_per_position)
        total = self._scheduler.budget.total_bytes
        if nbytes > total:
            raise InvalidRequest(
                f"this request needs {nbytes} bytes of KV cache ({prompt} prompt positions + {max_frames} frames) "
                f"but the server's whole cache budget is {total}; shorten the input or lower max_frames",
                param="input", code="context_length_exceeded")
        return Admission(request, max_frames, prompt, nbytes)

    def submit(self, request: SynthesisRequest, admission: Admission | None = None) -> RequestHandle:
        """Queue a request (``admission``: its :meth:`admit`, if already made). Raises InvalidRequest (cannot ever
        run), QueueFull (busy) or EngineClosed."""
        if admission is None or admission.request is not request:
            admission = self.admit(request)
        max_frames, prompt, nbytes = admission.max_frames, admission.prompt_positions, admission.cache_bytes
        seed = request.params.seed if request.params.seed is not None else random.SystemRandom().randrange(2**62)
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        handle = RequestHandle(self, request, seed, prompt, loop)
        budget = self.time_budget(max_frames)
        slot = _Slot(handle=handle, max_frames=max_frames, cache_bytes=nbytes, deadline=handle.submitted_at + budget,
                     chunk=self.config.chunk_frames)
        handle._slot = slot
        with self._cond:
            if not self.alive:
                raise EngineClosed("the engine is not running")
            self._scheduler.enqueue(slot)  # may raise QueueFull
            self._cond.notify_all()
        return handle

    def time_budget(self, max_frames: int) -> float:
        """Seconds a request of this frame bound may take from submission to its end (module doc)."""
        audio_s = max_frames / self.adapter.codec.frame_rate
        return self.config.time_budget_s + self.config.time_budget_per_audio_s * audio_s

    def _request_cancel(self, handle: RequestHandle) -> None:
        slot = handle._slot
        if slot is None or slot.done:
            return
        with self._cond:
            if slot not in self._cancels:
                self._cancels.append(slot)
            self._cond.notify_all()

    def stats(self) -> EngineStats:
        with self._cond:
            return EngineStats(
                alive=self.alive, running=len(self._scheduler.running), waiting=len(self._scheduler.waiting),
                cache_bytes_used=self._scheduler.budget.used_bytes,
                cache_bytes_total=self._scheduler.budget.total_bytes,
                steps=self._steps, frames=self._frames, finished={r: self._finished[r] for r in FINISH_REASONS})

    # --- the engine thread -------------------------------------------------------------------------------------

    def _run(self) -> None:
        if self.config.torch_threads is not None:
            torch.set_num_threads(self.config.torch_threads)
        while True:
            with self._cond:
                while not (self._stopping or self._cancels or self._scheduler.running or self._scheduler.waiting):
                    self._cond.wait()
                if self._stopping:
                    leftovers = list(self._scheduler.running) + list(self._scheduler.waiting)
                    break
                cancels, self._cancels = self._cancels, []
                now = time.perf_counter()
                late = [s for s in (*self._scheduler.running, *self._scheduler.waiting) if now > s.deadline]
            running: list[_Slot] = []
            try:
                for slot in cancels:
                    self._close(slot, "cancelled")
                for slot in late:
                    budget = slot.deadline - slot.handle.submitted_at
                    log.warning("request %s ran past its time budget of %.0f s", slot.handle.id, budget)
                    self._close(slot, "error", f"the request ran past its time budget of {budget:.0f} s", "timeout")
                with self._cond:
                    admitted = self._scheduler.admit()
                    running = list(self._scheduler.running)
                if admitted:
                    self._prefill([s for s in admitted if not s.done])
                active = [s for s in running if not s.done and s.state is not None]
                if active:
                    self._step(active)
            except Exception:  # a bug in the engine itself: fail what is running, keep the thread alive
                log.exception("engine step failed")
                for slot in running:
                    self._close(slot, "error", "internal engine error")
        for slot in leftovers:
            self._close(slot, "cancelled")

    def _prefill(self, slots: list[_Slot]) -> None:
        if not slots:
            return
        states, slots = self._isolated(slots, lambda group: self.adapter.prefill(
            [s.handle.request for s in group], [s.handle.seed for s in group]), "prefill")
        for slot, state in zip(slots, states):
            slot.state = state
            slot.decoder = self.adapter.codec.stream_decoder()

    def _step(self, slots: list[_Slot]) -> None:
        outs, slots = self._isolated(slots, lambda group: self.adapter.step([s.state for s in group]), "decode step")
        if not slots:
            return
        self._steps += 1
        verdicts = [(slot, self._advance(slot, out)) for slot, out in zip(slots, outs)]
        decode = [(slot, verdict) for slot, verdict in verdicts if verdict is not None]
        if decode:
            self._emit_many([slot for slot, _ in decode], [verdict != "chunk" for _, verdict in decode])
        for slot, verdict in decode:
            if verdict in ("stop", "bound"):
                self._close(slot, verdict)  # its audio went out above, flushed

    def _isolated(self, slots: list[_Slot], call, what: str) -> tuple[list, list[_Slot]]:
        """``call(slots)`` for the batch; if it raises, once per slot alone, so that one request's failure ends
        that request only (adapters leave their states untouched when they raise, and a request's output does
        not depend on its batch, so the others go on exactly as they would have). -> (outputs, their slots)."""
        try:
            return call(slots), slots
        except Exception as err:
            if len(slots) == 1:
                log.exception("%s failed", what)
                self._close(slots[0], "error", f"{what} failed: {err}")
                return [], []
            log.warning("batched %s failed (%s): running its %d requests one by one", what, err, len(slots))
        outs, kept = [], []
        for slot in slots:
            try:
                outs.append(call([slot])[0])
                kept.append(slot)
            except Exception as err:
                log.exception("%s failed for request %s", what, slot.handle.id)
                self._close(slot, "error", f"{what} failed: {err}")
        return outs, kept

    def _advance(self, slot: _Slot, out: StepOutput) -> str | None:
        """Take one step's output. -> "chunk" (a chunk of frames is ready to decode), "stop" or "bound" (the request
        ends: decode and flush what it has, then close it), or None (nothing to do yet)."""
        if out.error is not None:
            log.error("request %s failed: %s", slot.handle.id, out.error)
            self._close(slot, "error", out.error)
            return None
        codes, end = settle(out, slot.frames, slot.max_frames, slot.handle.request.params.stop_threshold)  # (K, t)
        if codes.shape[-1]:
            slot.pending.append(codes)
            slot.frames += codes.shape[-1]
            self._frames += codes.shape[-1]
        if end is not None:
            return end
        return "chunk" if sum(c.shape[-1] for c in slot.pending) >= slot.chunk else None

    def _emit_many(self, slots: list[_Slot], final: list[bool]) -> None:
        """Decode the pending frames of these slots (and flush the stream decoders of the ``final`` ones) with
        batched codec calls (``push_many``) and hand the audio out. A codec error fails every slot of the call
        (their decoders' states are no longer known)."""
        chunks = [self._take_pending(slot) for slot in slots]  # (1, K, t) each
        try:
            audios = push_many([slot.decoder for slot in slots], chunks, final)  # (1, s) each
        except Exception as err:
            log.exception("codec decode failed")
            for slot in slots:
                slot.decoder = None  # nothing more to flush
                self._close(slot, "error", f"codec decode failed: {err}")
            return
        for slot, audio, end in zip(slots, audios, final):
            self._deliver(slot, audio)
            if end:
                slot.decoder = None  # flushed

    def _take_pending(self, slot: _Slot) -> torch.Tensor:
        if not slot.pending:
            return torch.zeros((1, len(self.adapter.codec.codebook_sizes), 0), dtype=torch.long)
        codes = torch.cat(slot.pending, dim=-1)[None]  # (1, K, t)
        slot.pending = []
        return codes

    def _deliver(self, slot: _Slot, decoded: torch.Tensor) -> None:
        """Send decoded audio (1, s) to the slot's consumer as one chunk (nothing when s = 0)."""
        audio = decoded[0].detach().cpu().float().numpy()
        if audio.size:
            if slot.handle.first_audio_at is None:
                slot.handle.first_audio_at = time.perf_counter()
            slot.chunk = min(2 * slot.chunk, self.config.max_chunk_frames)
            slot.samples += audio.size
            slot.handle._outbox.put(audio)

    def _close(self, slot: _Slot, reason: str, error: str | None = None, code: str | None = None) -> None:
        if slot.done:
            return
        slot.done = True
        with self._cond:
            self._scheduler.remove(slot)
        if slot.state is not None:
            try:
                self.adapter.release(slot.state)
            except Exception:
                log.exception("adapter.release failed")
            slot.state = None
        handle = slot.handle
        info = FinishInfo(reason=reason, frames=slot.frames, samples=slot.samples,
                          prompt_positions=handle.prompt_positions,
                          wall_s=time.perf_counter() - handle.submitted_at, error=error, code=code)
        handle.finish = info
        with self._cond:
            self._finished[reason] += 1
        handle._outbox.put(info)
