"""The model families duet speaks with, in one table that the CLI, the server, eval and the shipped registry read.

A family is a checkpoint ``config.json`` "type": Gepard (autoregressive, one codec frame per step), Luna (masked
diffusion over a whole sentence) and Luna Realtime (block diffusion, streamed block by block). Each row says how to
build the family's runtime (``duet.tts.runtime.FamilyRuntime``; a ``module:function`` path, imported only when a
model of the family is loaded), which shipped models it has, which of ``duet speak``'s family options it takes,
and which kinds of cloning it can do:

- ``clone_from_audio``: from a reference clip alone (``duet speak --voice-ref``, the speech API's
  ``reference_audio``): a Gepard with the voice compressor;
- ``clone_from_prompt``: from a voice prompt, a clip and its transcript, continued by infilling (``duet speak
  --prompt``): Luna.

These are what a family *can* do; a loaded model says what it *does* (``FamilyTraits``: a Gepard without the voice
compressor cannot clone from audio).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from duet.errors import DuetError

# duet speak's options that only some families take: what a flag means, for the one-line refusal.
SPEAK_OPTIONS = {"steps": "refinement steps", "speed": "a speaking rate", "prompt": "a voice prompt"}


@dataclass(frozen=True)
class Family:
    name: str  # config.json "type"
    title: str  # in messages
    runtime_loader: str  # "module:function": (path, codec=, device=, name=) -> the family's FamilyRuntime
    models: tuple[str, ...]  # the shipped models of this family, the first one its default
    options: frozenset[str]  # keys of SPEAK_OPTIONS it takes (Gepard's speed: an aligned model only)
    clone_from_audio: bool
    clone_from_prompt: bool
    how_it_ends: str  # why a length option cannot apply, for the refusal
    # torch threads ``duet speak`` runs it with (None: torch's default). Gepard's decode step is a few hundred small
    # ops per frame: a second thread buys nothing, and on 2 busy cores loading gepard-tiny and speaking "Hello there"
    # took 3.5-6 s with two threads against 0.4-0.7 s with one. Its frames are the same with one thread or two
    # (tests/gepard/test_golden_frames.py holds them; they were recorded with one and checked with two).
    speak_threads: int | None = None

    @property
    def default_model(self) -> str:
        return self.models[0]

    def loader(self) -> Callable[..., Any]:
        module, _, function = self.runtime_loader.partition(":")
        return getattr(importlib.import_module(module), function)


FAMILIES = (
    Family("gepard", "Gepard", "duet.tts.gepard:load_gepard_runtime", ("gepard-tiny", "gepard-clone-tiny"),
           frozenset({"speed"}), clone_from_audio=True, clone_from_prompt=False,
           how_it_ends="it decodes one frame at a time until it stops", speak_threads=1),
    Family("luna", "Luna", "duet.tts.luna:load_luna_runtime", ("luna-tiny", "luna-expressive-tiny"),
           frozenset({"steps", "speed", "prompt"}), clone_from_audio=False, clone_from_prompt=True,
           how_it_ends="its duration model sets the length"),
    Family("luna-realtime", "Luna Realtime", "duet.tts.luna_realtime:load_realtime_runtime",
           ("luna-realtime-tiny",), frozenset({"steps"}), clone_from_audio=False, clone_from_prompt=False,
           how_it_ends="it ends by its learned end-of-speech decision: there is no length to scale"),
)
NAMES = tuple(f.name for f in FAMILIES)
_BY_NAME = {f.name: f for f in FAMILIES}


def family(name: str | None, what: str = "a model") -> Family:
    """The family called ``name`` (a config.json "type"), or a one-line DuetError naming ``what`` holds it."""
    found = _BY_NAME.get(name or "")
    if found is None:
        raise DuetError(f"{what} holds a {name!r} model; duet speaks with: {', '.join(NAMES)}")
    return found


def shipped_models() -> tuple[str, ...]:
    """Every shipped model name, each family's default first (the order ``duet speak --help`` lists them in)."""
    return tuple(f.default_model for f in FAMILIES) + tuple(m for f in FAMILIES for m in f.models[1:])
