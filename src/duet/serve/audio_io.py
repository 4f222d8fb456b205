"""Audio bytes at the HTTP boundary: response encodings out, reference clips for voice cloning in.

Out: ``pcm`` is raw 16-bit signed little-endian mono at the model's codec rate (OpenAI's ``pcm`` is 24 kHz; duet
serves the codec's native rate rather than resampling, and says which in the ``X-Sample-Rate`` header);
``wav`` is the same samples behind a streaming header whose RIFF and data sizes are 0xFFFFFFFF ("unknown
length", read correctly by libsndfile and browsers); ``flac`` is encoded once the whole utterance exists.
Chunk-wise conversion equals whole-utterance conversion sample for sample (the conversion is elementwise).
"""

from __future__ import annotations

import base64
import binascii
import io
import re
import struct

import numpy as np
import soundfile as sf

from duet.audio import check_audio, resample, to_mono
from duet.serve.errors import InvalidRequest

UNKNOWN_SIZE = 0xFFFFFFFF
MEDIA_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", "flac": "audio/flac"}


def pcm16(audio: np.ndarray) -> bytes:
    """(S,) float in [-1, 1] -> 16-bit little-endian PCM bytes (clipped, rounded)."""
    scaled = np.round(np.clip(audio, -1.0, 1.0) * 32767.0)
    return scaled.astype("<i2").tobytes()


def wav_stream_header(sample_rate: int, channels: int = 1, bits: int = 16) -> bytes:
    """A 44-byte PCM WAV header for a stream of unknown length."""
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", 1, channels, sample_rate, sample_rate * block, block, bits)
    return (b"RIFF" + struct.pack("<I", UNKNOWN_SIZE) + b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
            + b"data" + struct.pack("<I", UNKNOWN_SIZE))


def encode_wav(audio: np.ndarray, sample_rate: int) -> bytes:
    """(S,) float -> a whole 16-bit mono WAV file (its sizes in the header, unlike the streamed one)."""
    data = pcm16(audio)
    fmt = struct.pack("<HHIIHH", 1, 1, sample_rate, sample_rate * 2, 2, 16)
    return (b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
            + b"data" + struct.pack("<I", len(data)) + data)


def encode_flac(audio: np.ndarray, sample_rate: int) -> bytes:
    """(S,) float -> FLAC bytes. An utterance with no audio (the model stopped at once) is one silent sample: a FLAC
    stream cannot say "zero samples" (0 in its header means "unknown"), and no samples at all write no file."""
    if audio.size == 0:
        audio = np.zeros(1, np.float32)
    buf = io.BytesIO()
    sf.write(buf, np.clip(audio, -1.0, 1.0), sample_rate, format="FLAC", subtype="PCM_16")
    return buf.getvalue()


def decode_base64_audio(text: str, max_bytes: int) -> bytes:
    """A base64 string or ``data:audio/...;base64,`` URL -> bytes, rejecting oversize before decoding."""
    if text.startswith("data:"):
        head, _, text = text.partition(",")
        if ";base64" not in head:
            raise InvalidRequest("reference_audio data URL must be base64-encoded", param="reference_audio")
    if len(text) > (max_bytes * 4) // 3 + 4:
        raise InvalidRequest(f"reference_audio is larger than {max_bytes} bytes", param="reference_audio",
                             code="reference_too_large")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as err:
        raise InvalidRequest(f"reference_audio is not valid base64: {err}", param="reference_audio") from err


def decode_reference(data: bytes, sample_rate: int, max_bytes: int, min_seconds: float,
                     max_seconds: float) -> np.ndarray:
    """Reference clip bytes (any format libsndfile reads) -> mono float32 (S,) at ``sample_rate``.

    Limits are checked before the expensive parts: size before decoding, duration before resampling.
    """
    param = "reference_audio"
    if len(data) > max_bytes:
        raise InvalidRequest(f"reference_audio is larger than {max_bytes} bytes", param=param,
                             code="reference_too_large")
    if not data:
        raise InvalidRequest("reference_audio is empty", param=param)
    try:
        info = sf.info(io.BytesIO(data))
        seconds = info.frames / info.samplerate if info.samplerate > 0 else 0.0
        if info.frames > 0 and seconds > max_seconds:
            raise InvalidRequest(f"reference_audio lasts {seconds:.1f} s; the limit is {max_seconds} s",
                                 param=param, code="reference_too_long")
        audio, sr = sf.read(io.BytesIO(data), dtype="float32", always_2d=False)
    except InvalidRequest:
        raise
    except Exception as err:  # libsndfile raises several types for unreadable input
        why = re.sub(r"<[^>]*>", "the upload", str(err))  # no object reprs in messages
        raise InvalidRequest(f"reference_audio is not a readable audio file: {why}", param=param) from err
    try:
        audio = check_audio(to_mono(audio), what="reference_audio")
    except ValueError as err:
        raise InvalidRequest(str(err), param=param) from err
    seconds = audio.size / sr
    if not min_seconds <= seconds <= max_seconds:
        raise InvalidRequest(f"reference_audio lasts {seconds:.2f} s; it must last {min_seconds} to {max_seconds} s",
                             param=param, code="reference_duration")
    return resample(audio, sr, sample_rate)
