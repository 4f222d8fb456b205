"""OpenAI-compatible HTTP API over one engine per served model: ``POST /v1/audio/speech``, ``GET /v1/models``,
``GET /health``, ``GET /metrics`` (Prometheus text), ``GET /v1/audio/voices`` (duet: built-in speakers, cloning,
word timings, the emotions ``instructions`` may name and the inline event tags the model reads), the web page at
``GET /`` (``duet.serve.web``: type, listen as it streams, download the WAV) and the WebSocket
``/v1/audio/speech/stream`` that speaks text while it is still arriving (``text_stream.py``).

Several models: a request's ``model`` (an id or an alias) picks its model, whose own engine, queue and limits serve
it (``models.py``); ``/v1/models`` lists every name, ``/v1/audio/voices?model=`` one model's voices (default: the
first model's), ``/health`` and ``/metrics`` cover every model. Each response is at its own model's sample rate.

Request fields and the SSE event shapes (audio with word timestamps, SSML input, ``verify``) are in ``schemas.py``;
byte encodings in ``audio_io.py``; word timings as the audio goes out in ``word_feed.py``.
Every error is OpenAI's JSON shape ``{"error": {"message", "type", "param", "code"}}``: 400 bad input, 404 unknown
model or route, 408 body stalled, 413 body too large, 415 content type, 429 queue full (with ``Retry-After``),
500 a failure inside the model, 503 engine down, or overloaded: the request would not end within its time budget at
the current load (with ``Retry-After``), 504 the request's time budget ran out before its first audio;
a client gone before its request was read is counted as 499 (nginx's "client closed request"), not as an error.
A JSON body must be UTF-8.
Nothing a client sends can stop the server: the worst is a 4xx for that one request. Limits, timeouts and how a
response says the way its generation ended: ``schemas.py``.

Lifecycle of one speech request: parse and validate (limits from :class:`ServeConfig`), submit to the engine
(admission control may refuse it), wait for the first audio chunk while watching for a disconnect (so the
status code can still say if prefill failed), then stream. The response object's ``finally`` cancels the engine
request, so a client that goes away frees its slot and cache at the engine's next step.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import random
import time
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any, AsyncIterator, Callable, Sequence

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from duet.errors import DuetError
from duet.limits import SEED_LIMIT, invalid_unicode
from duet.metrics.clip import ClipScoring
from duet.serve import audio_io
from duet.serve.engine import Engine, RequestHandle
from duet.serve.errors import EngineClosed, GenerationFailed, InvalidRequest, ModelNotFound, Overloaded, QueueFull
from duet.serve.metrics import Metrics
from duet.serve.models import ServedModel, ServedModels
from duet.serve.schemas import (
    FINISH_HEADER,
    OPENAI_VOICES,
    RESPONSE_FORMATS,
    STREAMABLE_FORMATS,
    VERIFY_HEADER,
    WHOLE_FORMATS,
    ServeConfig,
    SpeechRequest,
    VerifyOptions,
    audio_delta,
    audio_done,
    audio_timestamps,
    error_body,
    first_error,
    sse,
)
from duet.serve.text_stream import add_text_stream
from duet.serve.web import ROUTES as WEB_ROUTES
from duet.serve.web import add_page
from duet.serve.word_feed import WordFeed
from duet.text.instructions import emotion_of_instructions
from duet.text.ssml import is_ssml, parse_ssml
from duet.tts.captions import word_json
from duet.tts.pace import Pace, gap_seconds, piece_pace
from duet.tts.request import SynthesisRequest
from duet.tts.speech import silence
from duet.tts.verify import BestOf, PieceScore, VerifyConfig, attempts

log = logging.getLogger("duet.serve")

ROUTES = ("/v1/audio/speech", "/v1/models", "/v1/audio/voices", "/health", "/metrics", *WEB_ROUTES)
_SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "stop_threshold", "max_frames", "seed", "steps")


class ApiError(Exception):
    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers


class _ClientGone(Exception):
    pass


class _CutStream(Exception):
    """End a streamed response without its closing chunk, so the client sees an incomplete transfer, not a whole
    answer (a failed or cut generation, a client that stopped reading)."""


class _CountRequests:
    """ASGI middleware: counts every HTTP response by method, route and status for ``/metrics``."""

    def __init__(self, app: ASGIApp, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = [500]  # what an exception before the response start becomes

        async def send_counting(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_counting)
        finally:
            route = scope["path"] if scope["path"] in ROUTES else "other"
            self.metrics.count_request(scope["method"], route, status[0])


class _EngineStream(StreamingResponse):
    """A streaming response that runs ``on_close`` however it ends: completed, client gone, cut, or cancelled
    before its body iterator ever started (which a generator's own ``finally`` would miss). A body part the client
    does not take within ``idle_timeout_s`` (it stopped reading) cuts the stream, so the request's slot is freed."""

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], None], idle_timeout_s: float,
                 **kwargs: Any):
        super().__init__(content, **kwargs)
        self._on_close = on_close
        self._idle_timeout_s = idle_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_or_cut(message: Message) -> None:
            if message["type"] != "http.response.body":
                return await send(message)
            try:
                async with asyncio.timeout(self._idle_timeout_s):
                    await send(message)
            except TimeoutError:
                log.warning("a client read nothing for %g s; its stream is cut", self._idle_timeout_s)
                raise _CutStream() from None

        try:
            await super().__call__(scope, receive, send_or_cut)
        except _CutStream:
            pass  # returning without the closing chunk: the server closes the connection
        except BaseExceptionGroup as group:  # the same, raised inside a task group
            if group.subgroup(_CutStream) is None or group.subgroup(lambda e: not isinstance(e, _CutStream)):
                raise
        finally:
            self._on_close()


def create_app(engines: Engine | Sequence[Engine], config: ServeConfig = ServeConfig(),
               scorer: ClipScoring | None = None) -> FastAPI:
    """The FastAPI app over one engine or several (one per model; the first is the default model); it starts
    every engine's thread on startup and stops them all on shutdown. ``scorer`` hears speech back for requests
    that ask to ``verify`` it (``duet.tts.verify``; Whisper, handed in from above this package); None refuses
    them."""
    models = ServedModels([engines] if isinstance(engines, Engine) else engines, config.model_aliases,
                          config.max_preparing)
    metrics = Metrics([model.name for model in models])

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        models.start()
        yield
        models.close()

    docs = {} if config.api_docs else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(title="duet", summary="OpenAI-compatible text-to-speech", lifespan=lifespan, **docs)
    app.state.models, app.state.metrics, app.state.config = models, metrics, config
    app.add_middleware(_CountRequests, metrics=metrics)

    # --- errors -------------------------------------------------------------------------------------------------

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, err: ApiError) -> JSONResponse:
        return JSONResponse(error_body(err.message, err.type, err.param, err.code), err.status, headers=err.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(err.status_code)
        return JSONResponse(error_body(str(err.detail), code=code), err.status_code, headers=err.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, err: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body(str(err.errors()[:1])), 400)

    @app.exception_handler(_ClientGone)
    async def _client_gone(request: Request, err: _ClientGone) -> Response:
        log.info("a client went away before its request was complete")
        return Response(status_code=499)  # nginx's "client closed request"; nobody reads it, /metrics counts it

    @app.exception_handler(Exception)
    async def _server_error(request: Request, err: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return JSONResponse(error_body("internal server error", "server_error"), 500)

    # --- small endpoints ----------------------------------------------------------------------------------------

    @app.get("/health")
    async def health() -> JSONResponse:
        body = _health(models)
        return JSONResponse(body, 200 if body["status"] == "ok" else 503)

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "duet", "root": model_id}
                for name, model_id in models.listing()]
        return {"object": "list", "data": data}

    @app.get("/v1/audio/voices")
    async def voices(model: str | None = None) -> dict[str, Any]:
        served = _find_model(models, model) if model is not None else models.default
        traits = served.runtime.traits
        return {"object": "list", "model": served.name, "data": [{"id": v} for v in traits.voices],
                "cloning": traits.clone_from_audio, "timestamps": traits.timings,
                "emotions": list(traits.emotions), "tags": list(traits.tags), "sample_rate": served.sample_rate}

    @app.get("/metrics")
    async def prometheus() -> PlainTextResponse:
        stats = {model.name: model.engine.stats() for model in models}
        return PlainTextResponse(metrics.render(stats), media_type="text/plain; version=0.0.4")

    if config.web_page:
        add_page(app)

    # --- speech -------------------------------------------------------------------------------------------------

    async def open_session(req: SpeechRequest) -> tuple[ServedModel, SynthesisRequest]:
        model = _find_model(models, req.model)
        return model, await _to_synthesis(req, None, config, model)

    add_text_stream(app, config.text_stream, open_session)

    @app.post("/v1/audio/speech")
    async def speech(request: Request) -> Response:
        t0 = time.perf_counter()
        req, upload = await _parse_speech(request, config)
        model = _find_model(models, req.model)
        sample_rate = model.sample_rate
        synth = await _to_synthesis(req, upload, config, model)
        verify = req.verify_options
        if verify is not None:
            if scorer is None:
                raise ApiError(400, "this server has no speech recogniser to verify with (duet serve needs the eval "
                               "extra: pip install 'duet[eval]')", param="verify", code="verify_unavailable")
            return await _verified_speech(request, req, model, synth, verify, scorer, metrics, config)
        handle = await _submit(model, synth)
        close = _closer(handle, model, metrics)
        chunks = handle.__aiter__()
        whole = req.response_format in WHOLE_FORMATS
        try:
            first = await _next_chunk(chunks, request, config.disconnect_poll_s)
            if first is not None:
                metrics.observe_ttfa(model.name, time.perf_counter() - t0)
            if whole:
                parts = [first] if first is not None else []
                parts += await _rest(chunks, request, config.disconnect_poll_s)
        except GenerationFailed as err:
            close()
            raise _failure(err) from err
        except _ClientGone:
            close()
            return Response(status_code=499)  # nginx's "client closed request"; nobody reads it
        except BaseException:
            close()
            raise

        headers = {"X-Request-Id": handle.id, "X-Sample-Rate": str(sample_rate), "Cache-Control": "no-store"}
        if whole:
            close()
            audio = np.concatenate(parts) if parts else np.zeros(0, np.float32)
            return await _whole_response(req.response_format, audio, handle, model, headers)
        idle = config.stream_idle_timeout_s
        feed = WordFeed(handle)
        if req.stream_format == "sse":
            body = _sse_body(handle, chunks, first, req.response_format, sample_rate, feed, req.timestamps)
            return _EngineStream(body, close, idle, media_type="text/event-stream", headers=headers)
        body = _audio_body(handle, chunks, first, req.response_format, sample_rate, feed)
        return _EngineStream(body, close, idle, media_type=audio_io.MEDIA_TYPES[req.response_format],
                             headers=headers)

    return app


# --- submitting and collecting -------------------------------------------------------------------------------------


async def _submit(model: ServedModel, synth: SynthesisRequest) -> RequestHandle:
    """Admit and submit one engine request; what the engine refuses is its HTTP error."""
    engine = model.engine
    budget = engine.config.time_budget_s
    try:
        # text preparation (and Luna's duration model) in a worker thread: /health never waits for it, and the
        # client waits at most the engine's base time budget for it (the thread itself cannot be stopped)
        async with asyncio.timeout(budget):
            admission = await model.admit(synth)
        return engine.submit(synth, admission)
    except TimeoutError:
        raise ApiError(504, f"preparing the text took longer than {budget:g} s; send a shorter input",
                       "server_error", param="input", code="timeout") from None
    except QueueFull as err:
        retry = str(max(1, math.ceil(err.retry_after_s)))
        raise ApiError(429, str(err), "rate_limit_error", code="server_busy", headers={"Retry-After": retry})
    except Overloaded as err:
        retry = str(max(1, math.ceil(err.retry_after_s)))
        raise ApiError(503, str(err), "server_error", code="server_overloaded", headers={"Retry-After": retry})
    except InvalidRequest as err:
        raise ApiError(400, str(err), param=err.param, code=err.code)
    except EngineClosed as err:
        raise ApiError(503, str(err), "server_error", code="engine_down")


def _failure(err: GenerationFailed) -> ApiError:
    """A request that failed before any of its audio was sent: 504 for its time budget, else 500."""
    if err.code == "timeout":
        return ApiError(504, str(err), "server_error", code="timeout")
    return ApiError(500, str(err), "server_error", code="generation_failed")


def _closer(handle: RequestHandle, model: ServedModel, metrics: Metrics) -> Callable[[], None]:
    """The request's close: cancel it in the engine (a no-op once it ended) and count it; idempotent (the
    response's finally, or an early error)."""
    metrics.stream_opened()
    closed = False

    def close() -> None:
        nonlocal closed
        if closed:
            return
        closed = True
        handle.cancel()
        metrics.stream_closed()
        info = handle.finish
        if info is not None and info.reason in ("stop", "bound"):
            metrics.observe_finished(model.name, info.wall_s, info.samples / model.sample_rate)

    return close


async def _rest(chunks: AsyncIterator[np.ndarray], request: Request, poll_s: float) -> list[np.ndarray]:
    """Every chunk still to come (``_next_chunk`` each)."""
    parts = []
    while (chunk := await _next_chunk(chunks, request, poll_s)) is not None:
        parts.append(chunk)
    return parts


async def _whole_response(fmt: str, audio: np.ndarray, handle: RequestHandle, model: ServedModel,
                          headers: dict[str, str], verified: PieceScore | None = None) -> Response:
    """A finished request's audio as one response: ``flac`` or ``json`` (schemas module doc), or ``wav`` / ``pcm``
    when it was verified; with an SSML pause after it appended as silence."""
    info = handle.finish
    assert info is not None  # the chunks ran out: the request has ended
    rate, feed = model.sample_rate, WordFeed(handle)
    pause = handle.request.pace.after if handle.request.pace is not None else 0.0
    if pause:
        audio = np.concatenate([audio, silence(gap_seconds(pause, await feed.trail(), 0.0), rate)])
    headers[FINISH_HEADER] = info.reason
    if verified is not None:
        headers[VERIFY_HEADER] = f"wer={verified.wer:.3f}; tries={verified.tries}; kept={verified.kept + 1}"
    if fmt == "json":
        words = [word_json(w) for w in await feed.rest()] if feed.timed else None
        body: dict[str, Any] = {"audio": base64.b64encode(audio_io.encode_wav(audio, rate)).decode("ascii"),
                                "format": "wav", "sample_rate": rate, "duration": round(len(audio) / rate, 3),
                                "words": words, "finish_reason": info.reason}
        if verified is not None:
            body["verify"] = {"wer": verified.wer, "transcript": verified.transcript, "tries": verified.tries,
                              "kept": verified.kept + 1, "first_wer": verified.first_wer}
        return JSONResponse(body, headers=headers)
    if fmt == "flac":
        return Response(audio_io.encode_flac(audio, rate), media_type="audio/flac", headers=headers)
    data = audio_io.encode_wav(audio, rate) if fmt == "wav" else audio_io.pcm16(audio)
    return Response(data, media_type=audio_io.MEDIA_TYPES[fmt], headers=headers)


async def _verified_speech(request: Request, req: SpeechRequest, model: ServedModel, synth: SynthesisRequest,
                           options: VerifyOptions, scorer: ClipScoring, metrics: Metrics,
                           config: ServeConfig) -> Response:
    """``verify``: make the request, hear it back, make it again with other seeds while it scores above
    ``max_wer`` (``duet.tts.verify``), and answer the best whole."""
    verify = VerifyConfig(max_wer=options.max_wer, tries=options.tries)
    seed = synth.params.seed if synth.params.seed is not None else random.SystemRandom().randrange(SEED_LIMIT)
    best = BestOf(0, synth.text, verify)
    kept: tuple[RequestHandle, np.ndarray] | None = None
    for attempt, attempt_seed in attempts(synth, seed, verify):
        handle = await _submit(model, replace(attempt, params=replace(attempt.params, seed=attempt_seed)))
        close = _closer(handle, model, metrics)
        try:
            parts = await _rest(handle.__aiter__(), request, config.disconnect_poll_s)
        except GenerationFailed as err:
            raise _failure(err) from err
        except _ClientGone:
            return Response(status_code=499)
        finally:
            close()
        audio = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        try:
            heard = await run_in_threadpool(scorer.score, audio, model.sample_rate, synth.text)
        except DuetError as err:  # the recogniser is missing (the eval extra), or cannot load
            raise ApiError(400, f"cannot verify: {err}", param="verify", code="verify_unavailable") from err
        if best.offer(heard):
            kept = (handle, audio)
        if best.done:
            break
    assert kept is not None
    handle, audio = kept
    headers = {"X-Request-Id": handle.id, "X-Sample-Rate": str(model.sample_rate), "Cache-Control": "no-store"}
    return await _whole_response(req.response_format, audio, handle, model, headers, best.score())


# --- request parsing ------------------------------------------------------------------------------------------------


def _short(text: str, limit: int = 64) -> str:
    """At most ``limit`` characters of a user's string, for an error message."""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


async def _read_body(request: Request, limit: int, timeout_s: float = 30.0) -> bytes:
    """The whole body, at most ``limit`` bytes (else 413); a body that stalls ``timeout_s`` between reads is a 408
    (a client that stops sending must not hold a connection and its handler forever)."""
    too_large = ApiError(413, f"request body is larger than {limit} bytes", code="request_too_large")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large
    parts, size = [], 0
    chunks = request.stream().__aiter__()
    while True:
        try:
            part = await asyncio.wait_for(chunks.__anext__(), timeout_s)
        except StopAsyncIteration:
            break
        except ClientDisconnect:  # gone while still sending: nothing to answer, nothing went wrong here
            raise _ClientGone() from None
        except asyncio.TimeoutError:
            raise ApiError(408, f"the request body stalled for {timeout_s:g} s", code="request_timeout") from None
        size += len(part)
        if size > limit:
            raise too_large
        parts.append(part)
    return b"".join(parts)


async def _parse_speech(request: Request, config: ServeConfig) -> tuple[SpeechRequest, bytes | None]:
    """JSON (strictly typed) or a form (multipart with an optional ``reference_audio`` file; lax types)."""
    body = await _read_body(request, config.max_body_bytes, config.body_timeout_s)
    ctype = request.headers.get("content-type", "").lower()
    upload: bytes | None = None
    is_form = ctype.startswith("multipart/form-data") or ctype.startswith("application/x-www-form-urlencoded")
    if is_form:
        async def replay() -> Message:
            return {"type": "http.request", "body": body, "more_body": False}

        try:
            form = await Request(request.scope, replay).form(max_files=1, max_fields=32,
                                                             max_part_size=config.max_body_bytes)
        except Exception as err:  # malformed multipart, too many parts
            raise ApiError(400, f"cannot parse form body: {getattr(err, 'detail', err)}") from err
        fields: dict[str, Any] = {}
        for key, value in form.multi_items():
            if isinstance(value, UploadFile):
                if key != "reference_audio":
                    raise ApiError(400, f"unexpected file field {key!r}", param=key)
                upload = await value.read()
            else:
                fields[key] = value
    else:
        if ctype and not ctype.startswith("application/json"):
            raise ApiError(415, f"unsupported content type {_short(ctype)!r}: send application/json, "
                           "multipart/form-data or application/x-www-form-urlencoded", code="unsupported_media_type")
        try:
            fields = json.loads(body.decode("utf-8"))  # JSON between systems is UTF-8 (RFC 8259 §8.1)
        except UnicodeDecodeError as err:
            raise ApiError(400, f"request body is not UTF-8 (byte {err.start}); send JSON in UTF-8") from err
        except ValueError as err:
            raise ApiError(400, f"request body is not valid JSON: {_short(str(err))}") from err
        except RecursionError as err:
            raise ApiError(400, "request body is not valid JSON: nested too deeply") from err
        if not isinstance(fields, dict):
            raise ApiError(400, "request body must be a JSON object")
    try:
        req = SpeechRequest.model_validate(fields, strict=not is_form)
    except ValidationError as err:
        param, message = first_error(err)
        raise ApiError(400, message, param=param, code="invalid_value") from err
    return req, upload


def _find_model(models: ServedModels, name: str) -> ServedModel:
    """The model a request names; an unknown name is OpenAI's 404 ``model_not_found``."""
    try:
        return models.find(name)
    except ModelNotFound as err:
        raise ApiError(404, f"model {_short(name)!r} not found; this server has {', '.join(err.available)}",
                       param="model", code="model_not_found") from None


def _health(models: ServedModels) -> dict[str, Any]:
    """``/health``'s body: "ok" while every model's engine runs; the totals over the models, then each model's
    (``model``: the default model's id)."""
    each = {}
    for model in models:
        stats = model.engine.stats()
        each[model.name] = {"status": "ok" if stats.alive else "engine_down", "running": stats.running,
                            "waiting": stats.waiting}
    up = all(m["status"] == "ok" for m in each.values())
    return {"status": "ok" if up else "engine_down", "model": models.default.name,
            "running": sum(m["running"] for m in each.values()), "waiting": sum(m["waiting"] for m in each.values()),
            "models": each}


async def _to_synthesis(req: SpeechRequest, upload: bytes | None, config: ServeConfig,
                        model: ServedModel) -> SynthesisRequest:
    """The engine request of a speech request to ``model`` (the one its ``model`` field names)."""
    runtime = model.runtime
    voices = runtime.traits.voices
    given = {name: getattr(req, name) for name in _SAMPLING_FIELDS if getattr(req, name) is not None}
    try:
        params = replace(runtime.default_params, **given)  # every bound, checked once (duet.limits)
    except InvalidRequest as err:
        raise ApiError(400, str(err), param=err.param, code=err.code) from err
    if req.response_format not in RESPONSE_FORMATS:
        raise ApiError(400, f"response_format {req.response_format!r} is not supported; use one of "
                       f"{', '.join(RESPONSE_FORMATS)}", param="response_format", code="unsupported_format")
    if req.stream_format == "sse" and req.response_format not in STREAMABLE_FORMATS:
        raise ApiError(400, f"stream_format 'sse' needs response_format {' or '.join(STREAMABLE_FORMATS)}",
                       param="stream_format")
    if req.timestamps and req.stream_format != "sse" and req.response_format != "json":
        raise ApiError(400, "timestamps come as events of stream_format 'sse', or in response_format 'json'",
                       param="timestamps")
    if req.verify_options is not None and req.stream_format == "sse":
        raise ApiError(400, "verify sends the best of several makings whole: it cannot stream as 'sse'",
                       param="verify")
    if not req.input.strip():
        raise ApiError(400, "input is empty", param="input")
    for name in ("input", "instructions"):
        problem = invalid_unicode(getattr(req, name) or "", name)
        if problem:
            raise ApiError(400, problem, param=name, code="invalid_value")
    if len(req.input) > config.max_input_chars:
        raise ApiError(400, f"input has {len(req.input)} characters; the limit is {config.max_input_chars}",
                       param="input", code="string_above_max_length")
    if req.instructions is not None and len(req.instructions) > config.max_instructions_chars:
        raise ApiError(400, f"instructions are longer than {config.max_instructions_chars} characters",
                       param="instructions", code="string_above_max_length")
    if upload is not None and req.reference_audio is not None:
        raise ApiError(400, "send reference_audio either as a file or as base64, not both", param="reference_audio")
    reference = None
    try:
        if req.reference_audio is not None:
            upload = audio_io.decode_base64_audio(req.reference_audio, config.max_reference_bytes)
        if upload is not None:
            if not runtime.traits.clone_from_audio:
                raise InvalidRequest(f"model {model.name} does not support voice cloning", param="reference_audio",
                                     code="cloning_unsupported")
            reference = await run_in_threadpool(
                audio_io.decode_reference, upload, model.sample_rate, config.max_reference_bytes,
                config.min_reference_seconds, config.max_reference_seconds)
    except InvalidRequest as err:
        raise ApiError(400, str(err), param=err.param, code=err.code) from err
    voice = req.voice_name
    if voice in OPENAI_VOICES and voice not in voices:
        voice = None  # an OpenAI client's voice name: this model's default voice (schemas module doc)
    if reference is None and voice is None:
        if not voices:
            raise ApiError(400, "voice is required", param="voice")
        voice = voices[0]
    try:
        emotion = emotion_of_instructions(req.instructions)  # the schemas module doc's rule
    except InvalidRequest as err:
        raise ApiError(400, str(err), param=err.param, code=err.code) from err
    text, pace = _read_input(req, runtime.traits.timings)
    return SynthesisRequest(text=text, voice=voice, emotion=emotion, speed=req.speed, reference=reference,
                            params=params, pace=pace)


def _read_input(req: SpeechRequest, timed: bool) -> tuple[str, Pace | None]:
    """The text to speak and its SSML marks (an input that starts with <speak>, schemas module doc); whether the
    model can give the ``timestamps`` asked for (``timed``: it has word timings)."""
    if req.timestamps and not timed:
        raise ApiError(400, "this model has no word timings (its frames follow no layout of its text: it has no "
                       "aligned text input)", param="timestamps", code="timestamps_unsupported")
    if not is_ssml(req.input):
        return req.input, None
    try:
        marked = parse_ssml(req.input)
    except InvalidRequest as err:  # an SsmlError: its message names the position
        raise ApiError(400, str(err), param=err.param, code=err.code) from err
    if not marked.text.strip():
        raise ApiError(400, "the SSML input has no text to speak", param="input", code="invalid_ssml")
    piece = piece_pace(marked, marked.text, 0, first=True, last=True)
    return piece.text, piece.pace


# --- response bodies ------------------------------------------------------------------------------------------------


async def _next_chunk(chunks: AsyncIterator[np.ndarray], request: Request, poll_s: float) -> np.ndarray | None:
    """The next audio chunk (None at the end), giving up with _ClientGone if the client disconnects meanwhile."""
    task = asyncio.ensure_future(chunks.__anext__())
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=poll_s)
            if done:
                try:
                    return task.result()
                except StopAsyncIteration:
                    return None
            if await request.is_disconnected():
                raise _ClientGone()
    finally:
        if not task.done():
            task.cancel()


async def _audio_body(handle: RequestHandle, chunks: AsyncIterator[np.ndarray], first: np.ndarray | None, fmt: str,
                      sample_rate: int, feed: WordFeed) -> AsyncIterator[bytes]:
    """Raw audio as it is made. Its headers have left, so how the generation ended shows in how the transfer ends
    (``schemas.py``): cleanly for ``stop`` or a bound the client set, cut for a failure or a text cut short."""
    if fmt == "wav":
        yield audio_io.wav_stream_header(sample_rate)
    if first is not None:
        yield audio_io.pcm16(first)
    try:
        async for chunk in chunks:
            yield audio_io.pcm16(chunk)
    except GenerationFailed as err:
        log.warning("request %s failed mid-stream (%s); its transfer is cut", handle.id, err)
        raise _CutStream() from None
    info = handle.finish
    if info is not None and info.reason == "bound" and handle.request.params.max_frames is None:
        log.warning("request %s reached its frame bound before its text ended; its transfer is cut", handle.id)
        raise _CutStream()
    if info is not None and (pause := await _pause_after(handle, feed, sample_rate)).size:
        yield audio_io.pcm16(pause)


async def _pause_after(handle: RequestHandle, feed: WordFeed, sample_rate: int) -> np.ndarray:
    """The silence of an SSML pause after the request's last word (``duet.tts.pace``; empty without one)."""
    pace = handle.request.pace
    if pace is None or not pace.after:
        return np.zeros(0, np.float32)
    return silence(gap_seconds(pace.after, await feed.trail(), 0.0), sample_rate)


async def _sse_body(handle: RequestHandle, chunks: AsyncIterator[np.ndarray], first: np.ndarray | None, fmt: str,
                    sample_rate: int, feed: WordFeed, timestamps: bool) -> AsyncIterator[bytes]:
    """Audio deltas; with ``timestamps``, a timestamps event after each delta that completes words (schemas module
    doc), the rest before the closing event."""
    def delta(data: bytes) -> bytes:
        return sse(audio_delta(base64.b64encode(data).decode("ascii")))

    async def stamps(words) -> AsyncIterator[bytes]:
        if timestamps and words:
            yield sse(audio_timestamps([word_json(w) for w in words]))

    head = audio_io.wav_stream_header(sample_rate) if fmt == "wav" else b""
    sent = 0  # samples
    try:
        async for chunk in _chained(first, chunks):
            yield delta(head + audio_io.pcm16(chunk))
            head = b""
            sent += len(chunk)
            async for event in stamps(await feed.ready(sent / sample_rate) if timestamps else ()):
                yield event
    except GenerationFailed as err:
        log.warning("request %s failed mid-stream: %s", handle.id, err)
        code = "timeout" if err.code == "timeout" else "generation_failed"
        yield sse({"type": "error", **error_body(str(err), "server_error", code=code)})
        return
    info = handle.finish
    assert info is not None
    pause = await _pause_after(handle, feed, sample_rate)
    if head or pause.size:
        yield delta(head + audio_io.pcm16(pause))
    async for event in stamps(await feed.rest() if timestamps else ()):
        yield event
    yield sse(audio_done(info.prompt_positions, info.frames, finish_reason=info.reason, sample_rate=sample_rate,
                         audio_seconds=(info.samples + pause.size) / sample_rate))


async def _chained(first: np.ndarray | None, chunks: AsyncIterator[np.ndarray]) -> AsyncIterator[np.ndarray]:
    if first is not None:
        yield first
    async for chunk in chunks:
        yield chunk
