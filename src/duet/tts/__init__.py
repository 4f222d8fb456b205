"""Speak with a shipped model in two lines: ``duet.load("gepard-tiny").speak("Hello there").write("hello.wav")``.

``load`` resolves a model name to ``<checkpoints root>/<name>`` (``$DUET_CHECKPOINTS`` or the checkout's
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

import json
from pathlib import Path

from duet.errors import DuetError

MODELS = ("gepard-tiny", "luna-tiny", "luna-realtime-tiny")  # the shipped models `duet speak --model` knows by name


def resolve_model(name_or_path: str | Path) -> Path:
    """A shipped model name or a checkpoint directory -> the directory (with a clear error when absent)."""
    from duet.codecs.registry import checkpoints_root

    path = Path(name_or_path)
    if path.is_dir():
        return path
    shipped = checkpoints_root() / str(name_or_path)
    if (shipped / "config.json").is_file():
        return shipped
    if str(name_or_path) in MODELS:
        raise DuetError(f"model {name_or_path!r} is not in {checkpoints_root()} (this checkout does not ship it)")
    raise DuetError(f"unknown model {str(name_or_path)!r}: use one of {', '.join(MODELS)} or a checkpoint directory")


def model_type(name_or_path: str | Path) -> tuple[Path, str]:
    """-> (directory, its config.json "type") without loading any weights."""
    path = resolve_model(name_or_path)
    try:
        kind = json.loads((path / "config.json").read_text()).get("type")
    except (OSError, json.JSONDecodeError) as err:
        raise DuetError(f"{path / 'config.json'} is missing or not JSON: {err}") from err
    return path, kind


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
