"""Speak with a shipped model in two lines: ``duet.load("gepard-tiny").speak("Hello there").write("hello.wav")``.

``load`` resolves a model name (``duet.shipped.resolve_model``) to ``<checkpoints root>/<name>`` (``$DUET_CHECKPOINTS`` or the checkout's
``checkpoints/``, as for codecs) or takes a directory, reads ``config.json`` and returns the family's speaker:

- ``gepard`` -> :class:`duet.tts.gepard.GepardSpeaker` (``speak``, ``stream`` frame by frame)
- ``luna`` -> :class:`duet.tts.luna.LunaSpeaker` (``speak``, ``stream`` one sentence at a time; ``steps``, ``speed``)
- ``luna-realtime`` -> :class:`duet.tts.luna_realtime.RealtimeSpeaker` (``speak``, ``stream`` block by block as
  blocks are committed; ``steps`` per block)

Speakers share one surface: ``voices``, ``sample_rate``, ``speak(text, voice=, seed=) -> Speech`` and
``stream(text, ...) -> Iterator[np.ndarray]`` (audio chunks as they are decoded); Luna's also take ``steps=`` and
``speed=`` (Realtime: ``steps=`` only).
"""

from __future__ import annotations

from pathlib import Path

from duet.errors import DuetError
from duet.shipped import MODELS, model_type, resolve_model  # noqa: F401  (duet.tts's names for users)


def load(name_or_path: str | Path, device: str = "cpu"):
    """The speaker for a shipped model name or a checkpoint directory."""
    path, kind = model_type(name_or_path)
    if kind == "gepard":
        from duet.tts.gepard import GepardSpeaker

        return GepardSpeaker.from_pretrained(path, device=device)
    if kind == "luna":
        from duet.tts.luna import LunaSpeaker

        return LunaSpeaker.from_pretrained(path, device=device)
    if kind == "luna-realtime":
        from duet.tts.luna_realtime import RealtimeSpeaker

        return RealtimeSpeaker.from_pretrained(path, device=device)
    raise DuetError(f"{path} holds a {kind!r} model; duet speaks with: gepard, luna, luna-realtime")
