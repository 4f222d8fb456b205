"""Speak with a shipped model in two lines: ``duet.load("gepard-tiny").speak("Hello there").write("hello.wav")``.

``load`` resolves a model name (``duet.shipped.resolve_model``) to ``<checkpoints root>/<name>`` (``$DUET_CHECKPOINTS``
or the checkout's ``checkpoints/``, as for codecs) or takes a directory, reads ``config.json`` and returns one
:class:`duet.tts.speaker.Speaker` over the family's runtime (``load_runtime``, the step code ``duet serve`` drives
too):

- ``gepard`` -> :class:`duet.tts.gepard.GepardRuntime` (streams frame by frame; ``speed`` for an aligned model;
  cloning from a reference clip alone, ``voice_ref``, for a model with the voice compressor)
- ``luna`` -> :class:`duet.tts.luna.LunaRuntime` (streams one sentence at a time; ``steps``, ``speed``, cloning with
  ``voice_prompt``, editing with ``edit``)
- ``luna-realtime`` -> :class:`duet.tts.luna_realtime.RealtimeRuntime` (streams block by block as blocks are
  committed; ``steps`` per block)

Every speaker has one surface: ``voices``, ``sample_rate``, ``speak(text, voice=, seed=, temperature=, top_k=,
cfg_scale=, speed=, steps=) -> Speech`` and ``stream(text, ...) -> Iterator[np.ndarray]`` (audio chunks as they are
decoded); an option the family does not take (``steps`` for Gepard, ``speed`` for Realtime) is a DuetError. A model
with aligned text input also says where each word lies in its audio (``Speech.words``, ``duet.tts.timestamps``).
"""

from __future__ import annotations

from pathlib import Path

from duet.families import family
from duet.shipped import MODELS, model_type, resolve_model  # noqa: F401  (duet.tts's names for users)


def load_runtime(name_or_path: str | Path, codec: str | None = None, device: str = "cpu", name: str | None = None):
    """The family runtime (``duet.tts.runtime.FamilyRuntime``) of a shipped model name or a checkpoint directory;
    ``codec`` defaults to the codec the checkpoint was trained on, ``name`` to the directory's name."""
    path, kind = model_type(name_or_path)
    return family(kind, str(path)).loader()(path, codec=codec, device=device, name=name)


def load(name_or_path: str | Path, device: str = "cpu"):
    """The speaker for a shipped model name or a checkpoint directory."""
    from duet.tts.speaker import Speaker

    return Speaker(load_runtime(name_or_path, device=device))
