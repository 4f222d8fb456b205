"""Request and event shapes of the OpenAI-compatible speech API, plus duet's documented extensions.

OpenAI fields: ``model``, ``input``, ``voice`` (a name or ``{"id": name}``), ``instructions``,
``response_format``, ``speed``, ``stream_format`` (``"audio"``: raw bytes as they are made; ``"sse"``: server-sent
events ``speech.audio.delta`` with base64 audio and one closing ``speech.audio.done`` with ``usage``).
Differences from OpenAI: formats are ``wav`` (the default here, OpenAI's is mp3), ``pcm`` and ``flac``;
audio is at the model's codec rate, not 24 kHz.
duet extensions (all optional): ``seed``, ``temperature``, ``top_k``, ``top_p``, ``stop_threshold``,
``max_frames`` (length bound), ``steps`` (refinement steps of a non-autoregressive model such as Luna;
autoregressive models ignore it) and ``reference_audio`` (base64 clip for voice cloning; multipart uploads send it
as a file field of the same name).

Bounds live here, in one place: ``top_k`` at most ``MAX_TOP_K`` (wider than any channel or codebook alphabet, so it
means "no truncation"), ``steps`` at most ``MAX_STEPS``, ``seed`` below 2**63; OpenAI's voice names
(``OPENAI_VOICES``) that a model does not have are read as its default voice, so OpenAI clients work unchanged.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

RESPONSE_FORMATS = ("wav", "pcm", "flac")
STREAMABLE_FORMATS = ("wav", "pcm")
MAX_TOP_K = 65_536
MAX_STEPS = 128  # Luna's refinement steps (32 by default); more buys nothing a listener hears and costs minutes
OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse")


class VoiceId(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    id: str


class SpeechRequest(BaseModel):
    # strict: a number where text belongs is an error, not silently converted (multipart forms validate lax)
    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    input: str
    voice: str | VoiceId | None = None
    instructions: str | None = None
    response_format: str = "wav"
    speed: float = Field(1.0, ge=0.25, le=4.0)
    stream_format: Literal["audio", "sse"] = "audio"
    # duet extensions
    seed: int | None = Field(None, ge=0, lt=2**63)
    temperature: float | None = Field(None, ge=0.0, le=10.0)
    top_k: int | None = Field(None, ge=0, le=MAX_TOP_K)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    stop_threshold: float | None = Field(None, gt=0.0, lt=1.0)
    max_frames: int | None = Field(None, ge=1)
    steps: int | None = Field(None, ge=1, le=MAX_STEPS)
    reference_audio: str | None = None

    @property
    def voice_name(self) -> str | None:
        return self.voice.id if isinstance(self.voice, VoiceId) else self.voice


def error_body(message: str, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def sse(event: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(event, separators=(',', ':'))}\n\n".encode()


def audio_delta(b64: str) -> dict[str, Any]:
    return {"type": "speech.audio.delta", "audio": b64}


def audio_done(input_tokens: int, output_tokens: int, **duet: Any) -> dict[str, Any]:
    """The closing event; duet's own facts (finish reason, sample rate) ride under a ``duet`` key."""
    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens,
             "total_tokens": input_tokens + output_tokens}
    return {"type": "speech.audio.done", "usage": usage, "duet": duet}
