"""The serving engine: continuous batching over a model's family runtime on one thread, its codec on another.

The engine drives a ``duet.tts.runtime.FamilyRuntime`` (Gepard, Luna, Luna Realtime, Gepard on vLLM, the mock: one
contract): it checks a request (``check_request``), bounds it (``min(runtime.frame_bound(request),
runtime.max_frames)`` unless it sets ``max_frames``), prefills it once and steps every running request until
``duet.tts.runtime.settle`` says it ended, then releases it. Every iteration of the engine thread (one *step*):
1. drops cancelled requests (their slot, cache reservation and runtime state are freed here);
2. admits queued requests while slots and the cache budget allow (``scheduler.py``) and prefills them;
3. advances every running request by one step (``runtime.step``), so requests join and leave the batch at any step,
   each with its own sampling parameters, seed, cache and length bound;
4. hands each request's new frames, once they make a chunk, to the codec thread (``decode_worker.py``), all of the
   step's chunks in one message, which decodes them with each request's own stream decoder, batched across requests
   (chunks of several lengths in one call where the codec allows it), and hands the audio to its consumer while the
   engine thread goes on with the next step.

Retiming (``duet.tts.retime``, what ``duet speak`` does, ``EngineConfig.retime``): a request at a speed the model
does not follow is made at the nearest one it does (``Admission.made``) and its audio time-stretched the rest of the
way; its SSML pauses are fitted to their length in the audio. The codec thread runs it on each chunk's audio before
the consumer gets it; a request with a break inside its text or before it comes whole at its end. The request's
retimed words, and the quiet before and after them, are its handle's ``retimer``'s.

Chunks: a request's frames go to its decoder ``chunk_frames`` at a time until its decoder gives audio (after the
codec's look-ahead, ``decode_worker.lookahead_frames``), then in chunks that double up to ``max_chunk_frames``. The
sizes follow from frame counts alone, never from timing, so the audio of a seed does not depend on the load.

A request ends with one of four reasons: ``stop`` (the model's stop probability exceeded the request's
threshold, or a non-AR runtime said ``final``), ``bound`` (its ``max_frames`` was reached), ``cancelled``
(the consumer called ``cancel`` or dropped its iterator, e.g. an HTTP client disconnected) and ``error``
(the runtime or the codec raised, or the request ran past its time budget; the engine fails the affected requests
and keeps serving). Its end reaches the consumer after its last audio.

Time budget: a request may take ``time_budget_s`` + ``time_budget_per_audio_s`` x the seconds of audio its frame
bound allows, from submission (queueing included), so a slow client of the batch, an overloaded server or a model
that refines too long cannot hold a slot for ever; past it the request ends as ``error`` with code ``timeout``.
Admission control (``cost.py``) keeps that from happening under load: ``submit`` estimates when a request would end
at the measured cost of a step and refuses one that would not end within its budget (``Overloaded``).

Consumers get a :class:`RequestHandle`: an async iterator of audio chunks (mono float32 numpy arrays at the
codec's sample rate) for asyncio code, or ``collect()`` for blocking code. Model calls happen on the engine thread
only, codec calls on the codec thread only; ``submit`` and ``cancel`` are safe from any thread.
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

from duet.errors import DuetError
from duet.finish import REASONS
from duet.serve.cost import CostConfig, StepClock, finish_in
from duet.serve.decode_worker import DecodeWorker, lookahead_frames
from duet.serve.errors import EngineClosed, GenerationFailed, InvalidRequest, Overloaded
from duet.serve.kv_budget import reservation_bytes
from duet.serve.scheduler import Scheduler, SchedulerConfig
from duet.tts.request import SynthesisRequest
from duet.tts.retime import RetimeConfig, Retimer, made_request
from duet.tts.runtime import FamilyRuntime, StepCost, StepOutput, check_request, settle
from duet.tts.timestamps import TextLayout

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
    # torch intra-op threads of the engine thread and of the codec thread, each (None: as many as the thread that
    # starts the engine has; a thread left at torch's default after the main thread lowered its own ran tiny ops
    # 30x slower). On CPU, 1 is often fastest: measured on 2 cores, a gepard-tiny step from a non-main thread took
    # 9.3 ms with 2 threads and 4.4 ms with 1; with 1 each, the model and the codec each have a core of 2.
    torch_threads: int | None = None
    # Wall-clock budget of one request (module doc): generous for one stream (gepard-tiny makes audio several
    # times faster than real time on one core), short of for ever for a stuck one.
    time_budget_s: float = 60.0
    time_budget_per_audio_s: float = 10.0
    # A step that runs at least ``wide_step_positions`` positions (Luna's grids, several Realtime blocks) uses
    # ``wide_step_threads`` torch threads on the engine thread: such passes are compute-bound matmuls that split
    # across cores, and those families' codec thread is mostly idle. Smaller steps (Gepard's one position a row, with
    # the codec busy beside it) keep ``torch_threads``. None: every step keeps ``torch_threads``.
    wide_step_threads: int | None = None
    wide_step_positions: int = 256
    retime: RetimeConfig = RetimeConfig()  # speeds the model follows, pause fitting: as duet speak's (module doc)
    cost: CostConfig = CostConfig()  # admission by estimated cost (cost.py)
    decode_backlog: int = 256  # chunks (and ends) queued for the codec thread before the engine thread waits for it

    def __post_init__(self) -> None:
        if not (self.time_budget_s > 0 and self.time_budget_per_audio_s >= 0):
            raise DuetError(f"need time_budget_s > 0 and time_budget_per_audio_s >= 0, got {self.time_budget_s} "
                            f"and {self.time_budget_per_audio_s}")
        if not 1 <= self.chunk_frames <= self.max_chunk_frames:
            raise DuetError(f"need 1 <= chunk_frames <= max_chunk_frames, got {self.chunk_frames} and "
                             f"{self.max_chunk_frames}")
        if self.torch_threads is not None and self.torch_threads < 1:
            raise DuetError(f"torch_threads must be >= 1, got {self.torch_threads}")
        if self.decode_backlog < 1:
            raise DuetError(f"decode_backlog must be >= 1, got {self.decode_backlog}")
        if self.wide_step_threads is not None and self.wide_step_threads < 1:
            raise DuetError(f"wide_step_threads must be >= 1 or None, got {self.wide_step_threads}")


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
    """A request checked for admission (``Engine.admit``): what the model makes for it and the stretch of that
    audio (``duet.tts.retime.made_request``), its frame bound, prompt positions, cache bytes and what its steps cost
    (``FamilyRuntime.step_cost``), all of the request made."""

    request: SynthesisRequest
    max_frames: int
    prompt_positions: int
    cache_bytes: int
    cost: StepCost
    made: SynthesisRequest
    factor: float


class RequestHandle:
    """A submitted request: iterate it for audio chunks, ``cancel`` it, read ``finish`` once it has ended."""

    def __init__(self, engine: "Engine", request: SynthesisRequest, seed: int, prompt_positions: int,
                 loop: asyncio.AbstractEventLoop | None, made: SynthesisRequest, retimer: Retimer):
        self.id = uuid.uuid4().hex
        self.request = request
        self.made = made  # what the model makes for it (Admission.made)
        # its audio retimed on the codec thread; its words, lead and trail once it has ended (duet.tts.retime)
        self.retimer = retimer
        self.seed = seed
        self.prompt_positions = prompt_positions
        self.submitted_at = time.perf_counter()
        self.first_audio_at: float | None = None
        self.finish: FinishInfo | None = None
        # how the request's text lies over its frames (StepOutput.layout: aligned models), from its first step
        self.layout: TextLayout | None = None
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


@dataclass(eq=False)  # identity semantics: the scheduler looks slots up with `in`, the codec thread keys streams
class _Slot:
    handle: RequestHandle
    max_frames: int
    cache_bytes: int
    deadline: float  # perf_counter time its budget runs out
    steps_left: int  # steps it may still take (cost.py)
    positions: int  # positions the model runs for it in a step (cost.py)
    chunk: int  # frames the next chunk waits for (module doc: grows once its decoder gives audio)
    state: Any = None
    frames: int = 0  # frames settled
    pushed: int = 0  # frames handed to the codec thread
    pending: list[torch.Tensor] = field(default_factory=list)  # (K, t) codes not yet handed over
    done: bool = False  # closed on the engine thread (its end may still be on its way through the codec thread)
    ending: tuple[str, str | None, str | None] = ("cancelled", None, None)  # (reason, error, code) once done
    samples: int = 0  # audio samples delivered (codec thread)


class Engine:
    def __init__(self, runtime: FamilyRuntime, config: EngineConfig = EngineConfig()):
        self.runtime = runtime
        self.config = config
        self._scheduler: Scheduler[_Slot] = Scheduler(config.scheduler)
        self._cond = threading.Condition()
        self._cancels: list[_Slot] = []
        self._codec_failures: list[tuple[_Slot, str]] = []
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._steps = 0
        self._frames = 0
        self._finished: Counter[str] = Counter()
        self._clock = StepClock(config.cost.smoothing)  # guarded by _cond
        self._lookahead = lookahead_frames(runtime.codec.stream_decoder())
        self._codec = DecodeWorker(runtime.codec, self._deliver, self._finish, self._codec_failed,
                                   max_backlog=config.decode_backlog)
        self._torch_threads = 0  # each thread's torch threads, set by start (EngineConfig.torch_threads)

    @property
    def name(self) -> str:
        return self.runtime.name

    @property
    def sample_rate(self) -> int:
        return self.runtime.codec.sample_rate

    # --- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> "Engine":
        if self._thread is None:
            self._torch_threads = self.config.torch_threads or torch.get_num_threads()
            self._codec.start(self._torch_threads)
            self._thread = threading.Thread(target=self._run, name="duet-engine", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the threads; requests still queued or running end as ``cancelled``."""
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
        runtime = self.runtime
        check_request(request, runtime)
        made, factor = made_request(request, self.config.retime)
        if made is not request:
            check_request(made, runtime)
        cap = runtime.max_frames
        max_frames = made.params.max_frames or min(runtime.frame_bound(made), cap)
        if max_frames > cap:
            raise InvalidRequest(f"max_frames {max_frames} exceeds this model's bound of {cap}", param="max_frames")
        prompt = runtime.prompt_positions(made)
        nbytes = reservation_bytes(prompt, max_frames, runtime.cache_bytes_per_position)
        total = self._scheduler.budget.total_bytes
        if nbytes > total:
            raise InvalidRequest(
                f"this request needs {nbytes} bytes of KV cache ({prompt} prompt positions + {max_frames} frames) "
                f"but the server's whole cache budget is {total}; shorten the input or lower max_frames",
                param="input", code="context_length_exceeded")
        return Admission(request, max_frames, prompt, nbytes, runtime.step_cost(made, max_frames), made, factor)

    def submit(self, request: SynthesisRequest, admission: Admission | None = None) -> RequestHandle:
        """Queue a request (``admission``: its :meth:`admit`, if already made). Raises InvalidRequest (cannot ever
        run), Overloaded (would not end within its time budget at the current load), QueueFull (busy) or
        EngineClosed."""
        if admission is None or admission.request is not request:
            admission = self.admit(request)
        seed = request.params.seed if request.params.seed is not None else random.SystemRandom().randrange(2**62)
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        retimer = Retimer(request, admission.factor, self.runtime.codec, self.config.retime,
                          self.runtime.traits.timings)
        handle = RequestHandle(self, request, seed, admission.prompt_positions, loop, admission.made, retimer)
        budget = self.time_budget(admission.max_frames)
        slot = _Slot(handle=handle, max_frames=admission.max_frames, cache_bytes=admission.cache_bytes,
                     deadline=handle.submitted_at + budget, steps_left=admission.cost.steps,
                     positions=admission.cost.positions, chunk=self.config.chunk_frames)
        handle._slot = slot
        with self._cond:
            if not self.alive:
                raise EngineClosed("the engine is not running")
            self._check_load(slot, budget)  # may raise Overloaded
            self._scheduler.enqueue(slot)  # may raise QueueFull
            self._cond.notify_all()
        return handle

    def _check_load(self, slot: _Slot, budget: float) -> None:
        """Refuse a request estimated to end past ``headroom`` x its budget at the measured cost of a step (cost.py).
        Called under the lock."""
        headroom = self.config.cost.headroom
        if headroom is None:
            return
        running = [StepCost(s.steps_left, s.positions) for s in self._scheduler.running]
        waiting = [StepCost(s.steps_left, s.positions) for s in self._scheduler.waiting]
        eta = finish_in(running, waiting, StepCost(slot.steps_left, slot.positions),
                        self.config.scheduler.max_running, self._clock)
        if eta is not None and eta > headroom * budget:
            raise Overloaded(f"server overloaded: at the current load this request would take about {eta:.1f} s, "
                             f"past its time budget of {budget:.1f} s; retry later", eta - headroom * budget)

    def time_budget(self, max_frames: int) -> float:
        """Seconds a request of this frame bound may take from submission to its end (module doc)."""
        audio_s = max_frames / self.runtime.codec.frame_rate
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
        torch.set_num_threads(self._torch_threads)
        threads = self._torch_threads
        while True:
            with self._cond:
                while not (self._stopping or self._cancels or self._codec_failures or self._scheduler.running
                           or self._scheduler.waiting):
                    self._cond.wait()
                if self._stopping:
                    leftovers = list(self._scheduler.running) + list(self._scheduler.waiting)
                    break
                cancels, self._cancels = self._cancels, []
                failures, self._codec_failures = self._codec_failures, []
                now = time.perf_counter()
                late = [s for s in (*self._scheduler.running, *self._scheduler.waiting) if now > s.deadline]
            running: list[_Slot] = []
            try:
                for slot in cancels:
                    self._close(slot, "cancelled")
                for slot, error in failures:
                    self._close(slot, "error", f"codec decode failed: {error}")
                for slot in late:
                    budget = slot.deadline - slot.handle.submitted_at
                    log.warning("request %s ran past its time budget of %.0f s", slot.handle.id, budget)
                    self._close(slot, "error", f"the request ran past its time budget of {budget:.0f} s", "timeout")
                with self._cond:
                    admitted = self._scheduler.admit()
                    running = list(self._scheduler.running)
                admitted = [s for s in admitted if not s.done]
                if admitted:
                    start = time.perf_counter()
                    self._prefill(admitted)
                    with self._cond:
                        self._clock.record_prefill(len(admitted), time.perf_counter() - start)
                active = [s for s in running if not s.done and s.state is not None]
                if active:
                    positions = sum(s.positions for s in active)
                    wanted = self._step_threads(positions)
                    if wanted != threads:
                        torch.set_num_threads(wanted)
                        threads = wanted
                    start = time.perf_counter()
                    self._step(active)
                    with self._cond:
                        self._clock.record_step(positions, time.perf_counter() - start)
            except Exception:  # a bug in the engine itself: fail what is running, keep the thread alive
                log.exception("engine step failed")
                for slot in running:
                    self._close(slot, "error", "internal engine error")
        for slot in leftovers:
            self._close(slot, "cancelled")
        self._codec.stop()  # after every request's end is queued: they all reach their consumers

    def _step_threads(self, positions: int) -> int:
        """Torch threads for a step running ``positions`` positions (EngineConfig: wide steps)."""
        wide = self.config.wide_step_threads
        return wide if wide is not None and positions >= self.config.wide_step_positions else self._torch_threads

    def _prefill(self, slots: list[_Slot]) -> None:
        states, slots = self._isolated(slots, lambda group: self.runtime.prefill(
            [s.handle.made for s in group], [s.handle.seed for s in group]), "prefill")
        for slot, state in zip(slots, states):
            slot.state = state

    def _step(self, slots: list[_Slot]) -> None:
        outs, slots = self._isolated(slots, lambda group: self.runtime.step([s.state for s in group]), "decode step")
        if not slots:
            return
        self._steps += 1
        with self._codec.tick():  # the step's chunks and ends reach the codec thread together: one batched decode
            for slot, out in zip(slots, outs):
                slot.steps_left -= 1
                verdict = self._advance(slot, out)
                if verdict == "chunk":
                    self._push(slot, flush=False)
                elif verdict in ("stop", "bound"):
                    self._push(slot, flush=True)  # its last frames, then its end
                    self._close(slot, verdict)

    def _isolated(self, slots: list[_Slot], call, what: str) -> tuple[list, list[_Slot]]:
        """``call(slots)`` for the batch; if it raises, once per slot alone, so that one request's failure ends
        that request only (runtimes leave their states untouched when they raise, and a request's output does
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
        if out.layout is not None and slot.handle.layout is None:
            slot.handle.layout = out.layout  # set before any of its audio reaches the consumer
        codes, end = settle(out, slot.frames, slot.max_frames, slot.handle.request.params.stop_threshold)  # (K, t)
        if codes.shape[-1]:
            slot.pending.append(codes)
            slot.frames += codes.shape[-1]
            self._frames += codes.shape[-1]
        if end is not None:
            return end
        return "chunk" if sum(c.shape[-1] for c in slot.pending) >= slot.chunk else None

    def _push(self, slot: _Slot, flush: bool) -> None:
        """Hand the slot's pending frames to the codec thread (``flush``: they are its last); the next chunk doubles
        once its decoder gives audio (module doc)."""
        if slot.pending:
            codes = torch.cat(slot.pending, dim=-1)  # (K, t)
        else:
            codes = torch.zeros((len(self.runtime.codec.codebook_sizes), 0), dtype=torch.long)
        slot.pending = []
        slot.pushed += codes.shape[-1]
        if slot.pushed > self._lookahead:
            slot.chunk = min(2 * slot.chunk, self.config.max_chunk_frames)
        self._codec.push(slot, codes, flush)

    def _close(self, slot: _Slot, reason: str, error: str | None = None, code: str | None = None) -> None:
        """End a request on the engine thread: free its slot and state now; its end reaches the consumer through
        the codec thread, after its audio (a request that did not end by stop or bound has its undecoded chunks
        dropped)."""
        if slot.done:
            return
        slot.done = True
        with self._cond:
            self._scheduler.remove(slot)
        if slot.state is not None:
            try:
                self.runtime.release(slot.state)
            except Exception:
                log.exception("runtime.release failed")
            slot.state = None
        if reason not in ("stop", "bound"):
            self._codec.drop(slot)
        slot.ending = (reason, error, code)
        with self._cond:
            self._finished[reason] += 1  # counted here, with the slot freed (stats stay consistent)
        self._codec.close(slot)

    # --- the codec thread's callbacks ----------------------------------------------------------------------------

    def _deliver(self, slot: _Slot, audio: np.ndarray) -> None:
        """One chunk of a request's decoded audio (s,) float32, retimed, to its consumer."""
        self._send(slot, slot.handle.retimer.push(audio))

    def _send(self, slot: _Slot, audio: np.ndarray) -> None:
        if not audio.size:
            return
        if slot.handle.first_audio_at is None:
            slot.handle.first_audio_at = time.perf_counter()
        slot.samples += audio.size
        slot.handle._outbox.put(audio)

    def _codec_failed(self, slot: _Slot, error: str) -> None:
        """The codec failed a request's stream: the engine thread ends it (its end then carries the error)."""
        with self._cond:
            self._codec_failures.append((slot, error))
            self._cond.notify_all()

    def _finish(self, slot: _Slot, codec_error: str | None) -> None:
        """A request's end, after its last audio: the reason the engine closed it with, or the codec's failure."""
        reason, error, code = slot.ending
        failure = None if codec_error is None else f"codec decode failed: {codec_error}"
        if failure is None and reason in ("stop", "bound"):
            try:  # the rest of its retimed audio (a held request's whole)
                self._send(slot, slot.handle.retimer.finish(slot.handle.layout, slot.frames))
            except Exception as err:
                log.exception("retiming request %s failed", slot.handle.id)
                failure = f"retiming failed: {err}"
        if failure is not None and reason != "error":  # its last chunk failed after the engine closed it
            with self._cond:
                self._finished[reason] -= 1
                self._finished["error"] += 1
            reason, error, code = "error", failure, None
        handle = slot.handle
        info = FinishInfo(reason=reason, frames=slot.frames, samples=slot.samples,
                          prompt_positions=handle.prompt_positions,
                          wall_s=time.perf_counter() - handle.submitted_at, error=error, code=code)
        handle.finish = info
        handle._outbox.put(info)
