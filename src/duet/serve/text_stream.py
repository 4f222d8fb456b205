"""Speak while the text is still arriving: the WebSocket route ``/v1/audio/speech/stream``.

A voice assistant feeds the TTS an LLM's token stream. The session cuts that stream into pieces as soon as a piece
can be spoken (``duet.text.segmenter``: a sentence end, a clause after a few words, the length bound, or a stall)
and speaks each piece through the engine as one request, in order, the next one already generating while the
current one streams. Pieces of a session share its voice and sampling fields, and piece i samples with seed
``seed + i``, as ``duet speak`` seeds the sentences of one text; ``gap_seconds`` of silence separate them, as
between the sentences of ``duet speak``.

Protocol: JSON text messages; audio is binary messages of 16-bit little-endian mono PCM at the session's
``sample_rate`` (its model's). ``session.start``'s ``model`` picks one of the server's models (``models.py``), whose
engine speaks every piece of the session.

The text may be SSML (``duet.text.ssml``): a session whose text starts with ``<speak>`` is read as markup while it
arrives, each piece carrying its breaks and rates (``duet.tts.pace.MarkedPieces``). The engine retimes each piece
as ``duet speak`` does (``duet.tts.retime``): a break inside a piece is fitted to its length in the audio (the piece
comes as one binary message once it is made), and a break where one piece ends and the next begins sizes the
silence between them, instead of ``gap_seconds``, so that the quiet measured at the end of the one and the start of
the other (the later piece held until it is made) and the silence together last the break. Markup is never looked
for in text that does not start so.

client -> server
  ``{"type": "session.start", "model": ..., "voice": ..., "speed": ..., "seed": ..., "temperature": ..., ...}``
      the first message: the fields of ``POST /v1/audio/speech`` except ``input``, ``response_format``,
      ``stream_format`` and ``verify``, checked as that route checks them; ``"timestamps": true`` asks for word
      timings (a model with aligned text input; another ends the session with ``timestamps_unsupported``)
  ``{"type": "text.delta", "delta": "..."}``  any amount of text, from one character to paragraphs
  ``{"type": "text.done"}``  the end of input: what is held is spoken, then the session ends
  ``{"type": "session.cancel"}``  stop now: pieces in flight are cancelled and their engine slots freed
server -> client
  ``{"type": "session.started", "model", "sample_rate", "format": "pcm16", "seed"}`` (``model``: the model's id, also
  when the client named an alias)
  ``{"type": "piece.started", "index", "text"}``, then its audio, then ``{"type": "piece.done", "index",
  "finish_reason", "audio_seconds"}``; with ``timestamps``, ``{"type": "piece.timestamps", "index", "words":
  [{"word", "start", "end", "phones"}]}`` after each binary message that completes words (the rest before
  ``piece.done``), in seconds of the session's audio: the words ``duet speak --stdin-stream --timestamps`` writes
  for the same text and seed (``duet.serve.word_feed``)
  ``{"type": "session.done", "reason": "done" | "cancelled" | "error", "pieces", "audio_seconds"}``, then the
  server closes the socket
  ``{"type": "error", "message", "code"}``: a bad message is answered with this and the session goes on; a bad
  ``session.start``, a limit, malformed SSML (``invalid_ssml``, naming its character in the session's text) or a
  failed piece ends the session after it.

Limits (:class:`duet.serve.schemas.TextStreamConfig`): the first message and every later one within
``idle_timeout_s`` of the one before; at most ``max_session_chars`` of text and ``max_session_s`` of wall clock.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from dataclasses import dataclass, replace
from typing import Any, Awaitable, Callable

import numpy as np
from fastapi import FastAPI, WebSocket
from pydantic import ValidationError
from starlette.websockets import WebSocketDisconnect, WebSocketState

from duet.limits import SEED_LIMIT, invalid_unicode
from duet.serve import audio_io
from duet.serve.engine import RequestHandle
from duet.serve.errors import EngineClosed, GenerationFailed, InvalidRequest, Overloaded, QueueFull
from duet.serve.models import ServedModel
from duet.serve.schemas import SpeechRequest, TextStreamConfig, first_error
from duet.serve.word_feed import WordFeed
from duet.text.ssml import SsmlError
from duet.tts.captions import word_json
from duet.tts.pace import MarkedPieces, Pace, PacedPiece, gap_seconds
from duet.tts.request import SynthesisRequest
from duet.tts.speech import silence
from duet.tts.timestamps import shifted

log = logging.getLogger("duet.serve")

ROUTE = "/v1/audio/speech/stream"
_START_FIELDS_REFUSED = ("input", "response_format", "stream_format", "verify")

# session.start's fields -> the model that speaks the session and its base request (the speech route's checks;
# raises that route's ApiError for what it refuses)
OpenSession = Callable[[SpeechRequest], Awaitable[tuple[ServedModel, SynthesisRequest]]]


class SessionError(Exception):
    """Ends a session with an error event (``code`` names the cause)."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


@dataclass
class _Piece:
    index: int
    text: str
    pace: Pace | None
    handle: RequestHandle


class _Session:
    """One client's session: reads its messages, cuts its text, speaks the pieces in order."""

    def __init__(self, ws: WebSocket, model: ServedModel, config: TextStreamConfig, base: SynthesisRequest,
                 seed: int, timestamps: bool = False):
        self.ws, self.model, self.config = ws, model, config
        self.sample_rate = model.sample_rate
        self.base = base  # the session's SynthesisRequest; each piece replaces its text, marks and seed
        self.seed = seed
        self.timestamps = timestamps
        self.cutter = MarkedPieces(config.segmenter)  # plain text or SSML -> pieces with their marks
        self.pieces: asyncio.Queue[PacedPiece | None] = asyncio.Queue()
        self.handles: list[RequestHandle] = []
        self.spoken = 0
        self.audio_samples = 0
        self.chars = 0
        self._send_lock = asyncio.Lock()

    async def send_json(self, event: dict[str, Any]) -> None:
        async with self._send_lock:
            await self.ws.send_text(json.dumps(event, separators=(",", ":")))

    async def send_audio(self, audio: np.ndarray) -> None:
        async with self._send_lock:
            await self.ws.send_bytes(audio_io.pcm16(audio))

    def queue(self, pieces: list[PacedPiece]) -> None:
        for piece in pieces:
            self.pieces.put_nowait(piece)

    def cut(self, delta: str | None) -> None:
        """Queue the pieces a delta (None: the clock alone) completes; bad SSML ends the session."""
        try:
            self.queue(self.cutter.poll(time.monotonic()) if delta is None else
                       self.cutter.push(delta, time.monotonic()))
        except SsmlError as err:
            raise SessionError(str(err), "invalid_ssml") from None

    # ---- input ----
    def on_message(self, raw: str | bytes | None) -> str | None:
        """Apply one client message; returns "done" or "cancel" when the input ends. Raises ValueError for a bad
        message (answered with an error event) and SessionError for a limit."""
        if not isinstance(raw, str):
            raise ValueError("messages must be JSON text, not binary")
        try:
            msg = json.loads(raw)
        except json.JSONDecodeError as err:
            raise ValueError(f"not JSON: {err.msg} at character {err.pos}") from None
        if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
            raise ValueError('a message is a JSON object with a "type"')
        kind = msg["type"]
        if kind == "text.delta":
            delta = msg.get("delta")
            if not isinstance(delta, str):
                raise ValueError('"text.delta" needs a string "delta"')
            problem = invalid_unicode(delta, "delta")
            if problem:
                raise ValueError(problem)
            self.chars += len(delta)
            if self.chars > self.config.max_session_chars:
                raise SessionError(f"the session's text passed {self.config.max_session_chars} characters",
                                   "session_too_long")
            self.cut(delta)
            return None
        if kind == "text.done":
            try:
                self.queue(self.cutter.finish())
            except SsmlError as err:
                raise SessionError(str(err), "invalid_ssml") from None
            return "done"
        if kind == "session.cancel":
            return "cancel"
        if kind == "session.start":
            raise ValueError("the session has started already")
        raise ValueError(f"unknown message type {kind!r}; expected text.delta, text.done or session.cancel")

    # ---- output ----
    async def submit_pieces(self, out: asyncio.Queue[_Piece | None]) -> None:
        """Pieces -> engine requests, in order; ``out`` holds one, so at most two pieces generate at once."""
        index = 0
        while (piece := await self.pieces.get()) is not None:
            seed = (self.seed + index) % SEED_LIMIT
            synth = replace(self.base, text=piece.text, pace=piece.pace, params=replace(self.base.params, seed=seed))
            handle = await self._submit(synth)
            self.handles.append(handle)
            await out.put(_Piece(index, piece.text, piece.pace, handle))
            index += 1
        await out.put(None)

    async def _submit(self, synth: SynthesisRequest) -> RequestHandle:
        while True:
            try:
                admission = await self.model.admit(synth)
                return self.model.engine.submit(synth, admission)
            except (QueueFull, Overloaded) as err:  # busy: wait for a turn (the session's wall clock bounds it)
                await asyncio.sleep(min(max(err.retry_after_s, 0.05), 1.0))
            except InvalidRequest as err:
                raise SessionError(f"piece {synth.text!r}: {err}", err.code or "invalid_request") from err
            except EngineClosed as err:
                raise SessionError(str(err), "engine_down") from err

    async def stream_pieces(self, submitted: asyncio.Queue[_Piece | None]) -> None:
        trail = 0.0  # seconds of the piece before after its last word (sizes an SSML pause: duet.tts.pace)
        while (piece := await submitted.get()) is not None:
            await self.send_json({"type": "piece.started", "index": piece.index, "text": piece.text})
            feed = WordFeed(piece.handle)
            samples = 0  # the piece's, with the gap before it
            try:
                chunks = piece.handle.__aiter__()
                first = await anext(chunks, None)  # its layout has come with its first step
                if piece.index:
                    gap = await self._gap(piece, feed, trail)
                    await self.send_audio(gap)
                    samples += len(gap)
                start = samples
                for chunk in [] if first is None else [first]:
                    samples += await self._send_chunk(piece, feed, chunk, start, samples)
                async for chunk in chunks:
                    samples += await self._send_chunk(piece, feed, chunk, start, samples)
            except GenerationFailed as err:
                raise SessionError(f"piece {piece.index} failed: {err}", err.code or "generation_failed") from err
            finish = piece.handle.finish
            if self.timestamps:
                await self._send_words(piece, await feed.rest(), start)
            if self.cutter.marked or (piece.pace is not None and piece.pace.after):
                trail = await feed.trail()
            if piece.pace is not None and piece.pace.after:
                pause = silence(gap_seconds(piece.pace.after, trail, 0.0), self.sample_rate)
                await self.send_audio(pause)
                samples += len(pause)
            self.audio_samples += samples
            self.spoken += 1
            await self.send_json({"type": "piece.done", "index": piece.index,
                                  "finish_reason": finish.reason if finish else None,
                                  "audio_seconds": round(samples / self.sample_rate, 3)})
        if self.cutter.trailing and self.spoken:  # a pause after the text's last piece, marked after it was cut
            pause = silence(gap_seconds(self.cutter.trailing, trail, 0.0), self.sample_rate)
            await self.send_audio(pause)
            self.audio_samples += len(pause)

    async def _gap(self, piece: _Piece, feed: WordFeed, trail: float) -> np.ndarray:
        """The silence before a piece after the first: the config's gap, or an SSML pause's (``duet.tts.pace``)."""
        if piece.pace is None or not piece.pace.before:
            return silence(self.config.gap_seconds, self.sample_rate)
        return silence(gap_seconds(piece.pace.before, trail, await feed.lead()), self.sample_rate)

    async def _send_chunk(self, piece: _Piece, feed: WordFeed, chunk: np.ndarray, start: int, sent: int) -> int:
        """Send one chunk of a piece whose audio started ``start`` samples into it (``sent`` so far, gap
        included), then the words it completes; -> its samples."""
        await self.send_audio(chunk)
        if self.timestamps:
            await self._send_words(piece, await feed.ready((sent + len(chunk) - start) / self.sample_rate), start)
        return len(chunk)

    async def _send_words(self, piece: _Piece, words, start: int) -> None:
        """A ``piece.timestamps`` event: ``words`` (seconds of the piece's audio) in seconds of the session's."""
        if words:
            at = (self.audio_samples + start) / self.sample_rate
            await self.send_json({"type": "piece.timestamps", "index": piece.index,
                                  "words": [word_json(w) for w in shifted(words, at)]})

    async def speak(self) -> None:
        submitted: asyncio.Queue[_Piece | None] = asyncio.Queue(maxsize=1)
        submitter = asyncio.create_task(self.submit_pieces(submitted))
        try:
            await asyncio.gather(submitter, self.stream_pieces(submitted))
        finally:
            submitter.cancel()

    def cancel_all(self) -> None:
        for handle in self.handles:
            handle.cancel()

    def done_event(self, reason: str) -> dict[str, Any]:
        return {"type": "session.done", "reason": reason, "pieces": self.spoken,
                "audio_seconds": round(self.audio_samples / self.sample_rate, 3)}


async def _read_start(ws: WebSocket, config: TextStreamConfig) -> tuple[SpeechRequest, bool]:
    """session.start -> the speech route's fields and whether it asks for ``timestamps``."""
    try:
        raw = await asyncio.wait_for(ws.receive_text(), config.idle_timeout_s)
    except TimeoutError:
        raise SessionError(f"no session.start within {config.idle_timeout_s:g} s", "idle_timeout") from None
    except KeyError:  # a binary first message
        raise SessionError("the first message must be JSON text", "invalid_message") from None
    try:
        msg = json.loads(raw)
    except json.JSONDecodeError as err:
        raise SessionError(f"the first message is not JSON: {err.msg}", "invalid_message") from None
    if not isinstance(msg, dict) or msg.get("type") != "session.start":
        raise SessionError('the first message must be {"type": "session.start", ...}', "invalid_message")
    fields = {k: v for k, v in msg.items() if k != "type"}
    refused = [k for k in _START_FIELDS_REFUSED if k in fields]
    if refused:
        raise SessionError(f"session.start takes no {', '.join(refused)}: text comes as text.delta messages and "
                           "audio as 16-bit PCM", "invalid_message")
    timestamps = fields.pop("timestamps", False)
    if not isinstance(timestamps, bool):
        raise SessionError("session.start: timestamps must be true or false", "invalid_message")
    try:
        # the text is checked piece by piece; "-" only satisfies the schema's required field
        return SpeechRequest.model_validate({**fields, "input": "-", "response_format": "pcm"}), timestamps
    except ValidationError as err:
        raise SessionError(f"session.start: {first_error(err)[1]}", "invalid_message") from None


async def run_session(ws: WebSocket, config: TextStreamConfig, open_session: OpenSession) -> None:
    """One WebSocket session, from accept to close; nothing a client sends escapes it as an exception."""
    await ws.accept()
    try:
        start, timestamps = await _read_start(ws, config)
        model, base = await open_session(start)
        if timestamps and not model.runtime.traits.timings:
            raise SessionError(f"{model.name} has no word timings (it has no aligned text input)",
                               "timestamps_unsupported")
    except SessionError as err:
        await _end(ws, {"type": "error", "message": str(err), "code": err.code}, code=1008)
        return
    except WebSocketDisconnect:
        return
    except Exception as err:  # the speech route's own error (ApiError): same message, same code
        await _end(ws, {"type": "error", "message": str(err), "code": getattr(err, "code", None) or "invalid_request"},
                   code=1008)
        return
    seed = base.params.seed if base.params.seed is not None else random.SystemRandom().randrange(SEED_LIMIT)
    session = _Session(ws, model, config, base, seed, timestamps)
    await session.send_json({"type": "session.started", "model": model.name, "sample_rate": model.sample_rate,
                             "format": "pcm16", "seed": seed})
    inbox: asyncio.Queue[str | bytes | None] = asyncio.Queue()
    reader = asyncio.create_task(_read_into(ws, inbox))
    speaker = asyncio.create_task(session.speak())
    started = time.monotonic()
    last_message = started
    reason, error = "done", None
    try:
        input_open = True
        while True:
            now = time.monotonic()
            if now - started > config.max_session_s:
                raise SessionError(f"the session passed its {config.max_session_s:g} s limit", "session_too_long")
            if speaker.done():
                speaker.result()  # raises the piece's failure
                break
            if not input_open:
                await asyncio.wait({speaker}, timeout=config.poll_s)
                continue
            try:
                raw = await asyncio.wait_for(inbox.get(), config.poll_s)
            except TimeoutError:
                if time.monotonic() - last_message > config.idle_timeout_s:
                    raise SessionError(f"no message for {config.idle_timeout_s:g} s", "idle_timeout") from None
                session.cut(None)
                continue
            last_message = time.monotonic()
            if raw is None:  # the client went away
                reason = "cancelled"
                return
            try:
                ended = session.on_message(raw)
            except ValueError as err:
                await session.send_json({"type": "error", "message": str(err), "code": "invalid_message"})
                continue
            if ended == "cancel":
                reason = "cancelled"
                break
            if ended == "done":
                session.pieces.put_nowait(None)
                input_open = False
    except SessionError as err:
        reason, error = "error", {"type": "error", "message": str(err), "code": err.code}
    except WebSocketDisconnect:
        reason = "cancelled"
        return
    except Exception as err:  # a failure of ours (the client's socket, the engine): this session only
        log.exception("text-stream session failed")
        reason, error = "error", {"type": "error", "message": f"server error: {err}", "code": "server_error"}
    finally:
        speaker.cancel()
        reader.cancel()
        session.cancel_all()  # frees the engine slots of pieces still in flight
        if reason != "cancelled" or not _gone(ws):
            events = ([error] if error else []) + [session.done_event(reason)]
            await _end(ws, *events)


def _gone(ws: WebSocket) -> bool:
    return ws.client_state != WebSocketState.CONNECTED or ws.application_state != WebSocketState.CONNECTED


async def _read_into(ws: WebSocket, inbox: asyncio.Queue) -> None:
    """Client messages -> ``inbox`` (text or bytes); None when the client disconnects."""
    try:
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                break
            inbox.put_nowait(message.get("text") if message.get("text") is not None else message.get("bytes"))
    except (WebSocketDisconnect, RuntimeError):
        pass
    inbox.put_nowait(None)


async def _end(ws: WebSocket, *events: dict[str, Any], code: int = 1000) -> None:
    """Send the closing events and close; a client that has gone already is not an error."""
    try:
        for event in events:
            await ws.send_text(json.dumps(event, separators=(",", ":")))
        await ws.close(code)
    except (WebSocketDisconnect, RuntimeError):
        pass


def add_text_stream(app: FastAPI, config: TextStreamConfig, open_session: OpenSession) -> None:
    @app.websocket(ROUTE)
    async def speech_stream(ws: WebSocket) -> None:
        await run_session(ws, config, open_session)
