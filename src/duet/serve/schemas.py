"""Request and event shapes of the OpenAI-compatible speech API, plus duet's documented extensions.

OpenAI fields: ``model`` (one of the server's models, by id or alias: ``models.py``; another is a 404), ``input``,
``voice`` (a name or ``{"id": name}``), ``instructions``, ``response_format``, ``speed``, ``stream_format``
(``"audio"``: raw bytes as they are made; ``"sse"``: server-sent events ``speech.audio.delta`` with base64 audio and
one closing ``speech.audio.done`` with ``usage``).
Differences from OpenAI: formats are ``wav`` (the default here, OpenAI's is mp3), ``pcm``, ``flac`` and duet's
``json`` (audio with timestamps, below); audio is at the chosen model's codec rate, not 24 kHz.
duet extensions (all optional): ``seed``, ``temperature``, ``top_k``, ``top_p``, ``stop_threshold``,
``max_frames`` (length bound), ``steps`` (refinement steps of a non-autoregressive model such as Luna;
autoregressive models ignore it), ``reference_audio`` (base64 clip for voice cloning; multipart uploads send it
as a file field of the same name), ``timestamps`` and ``verify`` (below).

Audio with timestamps (what hosted services call "with timestamps" or "alignment"): word timings come from the
model's own alignment (``duet.tts.timestamps``: a model with aligned text input; another answers ``timestamps``
with a 400 ``timestamps_unsupported``), in seconds of the audio returned, as ``duet speak --timestamps x.json``
writes them: ``{"word", "start", "end", "phones": [{"phone", "start", "end"}]}`` (phones: the model's IPA
phones, one to a few characters each; ``[]`` for a model that reads text, not phonemes).

- ``response_format: "json"`` (sent whole, not streamed) answers ``{"audio": base64 WAV, "format": "wav",
  "sample_rate", "duration", "words": [...] or null (a model without timings), "finish_reason"}`` (and
  ``"verify"``, below);
- ``"timestamps": true`` with ``stream_format: "sse"`` adds ``{"type": "speech.audio.timestamps", "words": [...]}``
  events: each after the audio delta that completes its words (a word goes out once the audio sent holds its
  end), the rest before ``speech.audio.done``; together they are the words of the ``json`` response for the same
  seed, exactly. The text-streaming WebSocket takes the same field (``text_stream.py``).

SSML: an ``input`` that starts with ``<speak>`` is read as SSML (``duet.text.ssml``: ``<break time|strength>``,
``<prosody rate>``, ``<sub alias>``), laid into the model's durations (``duet.tts.pace``; a break after the last
word is silence appended to the audio; a model without aligned text input refuses breaks and rates inside the text
with a 400 ``ssml_unsupported``), then, as ``duet speak`` does, a break fitted to its length in the audio and a
``speed`` above 1.25 made at 1.25 and compressed (``duet.tts.retime``, the engine's); a request with a break inside
its text is sent as one chunk once it is made. Any other input is plain text, whatever it holds. Malformed or
unsupported markup is a 400 with ``code`` ``invalid_ssml`` and a message that names its character position. The
word timings include the breaks.

``verify`` (``true``, or ``{"max_wer": 0.0, "tries": 3}``): the audio is heard back by the server's speech
recogniser (Whisper, ``duet serve`` with the eval extra; a server without one answers 400 ``verify_unavailable``)
and made again with other seeds while its word error rate is above ``max_wer``, up to ``tries`` makings; the best
is sent, whole (not streamed; ``stream_format: "sse"`` is refused with it), with its score in the ``json``
response's ``"verify": {"wer", "transcript", "tries", "kept", "first_wer"}`` and, for any format, in the
``X-Verify`` header (``wer=0.000; tries=2; kept=2``). The whole input is one piece (``duet.tts.verify``). It costs
one transcription per making and a making per retry.

OpenAI's voice names (``OPENAI_VOICES``) that a model does not have are read as its default voice, so OpenAI
clients work unchanged.

``instructions`` is read as one utterance-level emotion (``duet.text.tokens.EMOTIONS``: neutral, happy, sad,
angry, surprised, fearful, disgusted, whisper), which a Luna model puts in its instruction context (Luna-TTS §2.3;
``duet.text.instructions``): an exact emotion name (``"happy"``), or a short instruction of at most 8 words whose
emotion words (names, adjectives, adverbs: ``"speak happily"``, ``"in a sad voice"``, ``"whisper it"``, case
ignored) all name the same one. Anything else is a 400 with ``param`` ``instructions`` that lists the emotions: no
emotion word, two different emotions, a negation (``"not angry"``), a longer text. Empty or blank instructions ask
for no emotion. A model without emotion control (Gepard, a Luna whose tokenizer has no emotion tokens) answers an
emotion with a 400 ``emotion_unsupported``. Non-verbal events need no field: inline tags in ``input``
(``"Well [laugh] hello"``; ``duet.text.tags``).

Limits, all here (every one answers with an OpenAI-shaped error, never a cut or a hang):

=========================  =================================================  ======================================
what                       bound                                              set by / refused with
=========================  =================================================  ======================================
``top_k``                  0..``MAX_TOP_K`` (wider than any alphabet: "off")  duet.limits; 400
``steps``                  1..``MAX_STEPS``                                   duet.limits; 400
``seed``                   0..2**63 - 1                                       duet.limits; 400
``temperature``            0..10, finite                                      duet.limits; 400
``speed``                  0.25..4 (a model may allow less)                   duet.limits, the runtime; 400
``input``                  ``ServeConfig.max_input_chars`` characters, valid  ``--max-input-chars``; 400
                           Unicode (a lone surrogate is refused)
``instructions``           ``ServeConfig.max_instructions_chars``; one        400
                           emotion (above)
body                       ``ServeConfig.max_body_bytes``                     ``--max-body-mib``; 413
reference clip             ``max_reference_bytes``, 0.5..30 s                 ``--max-reference-seconds``; 400
frames of one request      the runtime's ``max_frames`` (gepard-tiny 40 s,    the model; a text predicted longer is
                           Luna 30 s)                                         a 400 ``context_length_exceeded``
request headers            ``ServeConfig.header_timeout_s`` (10 s)            ``--header-timeout``; connection closed
request body stall         ``ServeConfig.body_timeout_s`` (30 s)              ``--body-timeout``; 408
idle stream                ``ServeConfig.stream_idle_timeout_s`` (30 s): a    ``--stream-idle-timeout``; transfer cut,
                           client that reads nothing for this long            slot freed
wall clock of one request  ``EngineConfig.time_budget_s`` + ``time_budget_    ``--time-budget``, ``--time-budget-
                           per_audio_s`` x the seconds of audio it may make   per-audio``; 504 before its audio,
                           (60 s + 10 x; queueing included)                   else a cut transfer / SSE error
estimated cost at submit   ends within ``CostConfig.headroom`` (0.8) of the   the engine (``duet.serve.cost``); 503
                           wall-clock budget above, at the measured cost of   ``server_overloaded`` with
                           a step at the current load                         ``Retry-After``
text preparation           ``EngineConfig.time_budget_s``, in a worker        ``--time-budget``; 504
                           thread (``/health`` never waits for it); at most
                           ``ServeConfig.max_preparing`` of one model at
                           once, the rest wait their turn inside that budget
JSON body                  UTF-8, an object, nested at most as deep as        400; another content type: 415
                           Python's recursion limit allows
text-stream session        ``TextStreamConfig``: 30 s between messages,       ``--text-stream-idle-timeout``,
                           20,000 characters, 900 s of wall clock             ``--text-stream-max-chars``,
                                                                              ``--text-stream-max-seconds``; an
                                                                              error event, then the session ends
=========================  =================================================  ======================================

How a generation ended (``duet.finish``: stop, bound, cancelled, error) is in every response form: the SSE closing
event's ``duet.finish_reason``; the ``X-Finish-Reason`` header of a response sent whole (``flac``); and for raw
streamed audio (``wav``, ``pcm`` with ``stream_format`` ``"audio"``), whose headers leave before its end, in how the
transfer ends: it ends cleanly only for ``stop``, or ``bound`` at a ``max_frames`` the client set; an error, the time
budget or a frame bound the client did not ask for (a text cut short) ends it with an incomplete chunked transfer,
which every HTTP client reports as an error. Texts too long for one request are refused with a 400 before any
audio (an aligned model predicts their length), never cut silently: clients split them, as ``duet speak`` does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from duet.errors import DuetError
from duet.limits import MAX_SPEED, MIN_SPEED
from duet.text.segmenter import SegmenterConfig

RESPONSE_FORMATS = ("wav", "pcm", "flac", "json")
WHOLE_FORMATS = ("flac", "json")  # sent whole, once the audio has ended
STREAMABLE_FORMATS = ("wav", "pcm")
OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse")
FINISH_HEADER = "X-Finish-Reason"
VERIFY_HEADER = "X-Verify"


@dataclass(frozen=True)
class TextStreamConfig:
    """Limits and pacing of a text-streaming session (``duet.serve.text_stream``)."""

    idle_timeout_s: float = 30.0  # the first message, and each later one, within this of the one before
    max_session_chars: int = 20_000  # text of one session, all deltas together
    max_session_s: float = 900.0  # wall clock of one session
    gap_seconds: float = 0.15  # silence between pieces, as between the sentences of ``duet speak``
    poll_s: float = 0.05  # how often a session looks at the clock (a stalled LLM, the limits)
    segmenter: SegmenterConfig = SegmenterConfig()

    def __post_init__(self) -> None:
        if not all(t > 0 for t in (self.idle_timeout_s, self.max_session_s, self.poll_s)):
            raise DuetError("text-stream timeouts must be positive seconds")
        if self.max_session_chars < 1 or self.gap_seconds < 0:
            raise DuetError("max_session_chars must be positive and gap_seconds not negative")


@dataclass(frozen=True)
class ServeConfig:
    """The HTTP layer's limits (the table above); ``duet serve`` flags are parsed into it once."""

    max_input_chars: int = 4096
    max_instructions_chars: int = 1024
    max_body_bytes: int = 16 * 1024**2  # whole request body, JSON or multipart
    max_reference_bytes: int = 10 * 1024**2  # the reference clip's encoded bytes
    min_reference_seconds: float = 0.5
    max_reference_seconds: float = 30.0
    model_aliases: tuple[tuple[str, str], ...] = ()  # (alias, model id): more names a request may use (e.g. "tts-1")
    disconnect_poll_s: float = 0.2  # how often a request waiting for its first audio checks its client
    web_page: bool = True  # serve the page at / (duet.serve.web)
    header_timeout_s: float = 10.0  # a connection whose request headers are not all there by then is closed
    body_timeout_s: float = 30.0  # a request body that stalls this long between two reads gets a 408
    stream_idle_timeout_s: float = 30.0  # a streamed response its client does not read for this long is cut
    api_docs: bool = False  # FastAPI's /docs, /redoc and /openapi.json (off unless asked: --api-docs)
    max_preparing: int = 2  # text preparations of one model running at once (each holds a core); more wait
    text_stream: TextStreamConfig = TextStreamConfig()  # /v1/audio/speech/stream

    def __post_init__(self) -> None:
        timeouts = (self.header_timeout_s, self.body_timeout_s, self.stream_idle_timeout_s, self.disconnect_poll_s)
        if not all(t > 0 for t in timeouts):
            raise DuetError(f"timeouts must be positive seconds, got {timeouts}")
        if self.max_preparing < 1:
            raise DuetError(f"max_preparing must be at least 1, got {self.max_preparing}")


class VoiceId(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    id: str


class VerifyOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    max_wer: float = Field(0.0, ge=0.0, le=1.0)
    tries: int = Field(3, ge=1, le=8)


class SpeechRequest(BaseModel):
    # strict: a number where text belongs is an error, not silently converted (multipart forms validate lax)
    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    input: str
    voice: str | VoiceId | None = None
    instructions: str | None = None
    response_format: str = "wav"
    speed: float = Field(1.0, ge=MIN_SPEED, le=MAX_SPEED)
    stream_format: Literal["audio", "sse"] = "audio"
    # duet extensions: sampling fields, whose bounds duet.sampling.SamplingParams checks (duet.limits)
    seed: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    stop_threshold: float | None = None
    max_frames: int | None = None
    steps: int | None = None
    reference_audio: str | None = None
    timestamps: bool = False  # SSE: word timings as the audio goes out (module doc); json has them anyway
    verify: bool | VerifyOptions = False

    @property
    def voice_name(self) -> str | None:
        return self.voice.id if isinstance(self.voice, VoiceId) else self.voice

    @property
    def verify_options(self) -> VerifyOptions | None:
        if self.verify is False:
            return None
        return VerifyOptions() if self.verify is True else self.verify


def first_error(err: ValidationError) -> tuple[str | None, str]:
    """The first problem pydantic found in a request: (the field's dotted path or None, "path: message")."""
    first = err.errors()[0]
    param = ".".join(str(p) for p in first["loc"]) or None
    return param, f"{param}: {first['msg']}"


def error_body(message: str, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def sse(event: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(event, separators=(',', ':'))}\n\n".encode()


def audio_delta(b64: str) -> dict[str, Any]:
    return {"type": "speech.audio.delta", "audio": b64}


def audio_timestamps(words: list[dict[str, Any]]) -> dict[str, Any]:
    """Word timings of audio already sent (``duet.tts.captions.word_json`` each)."""
    return {"type": "speech.audio.timestamps", "words": words}


def audio_done(input_tokens: int, output_tokens: int, **duet: Any) -> dict[str, Any]:
    """The closing event; duet's own facts (finish reason, sample rate) ride under a ``duet`` key."""
    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens,
             "total_tokens": input_tokens + output_tokens}
    return {"type": "speech.audio.done", "usage": usage, "duet": duet}
