"""What an expressive corpus adds to a preset: voices read in every speaking style, some with inline events.

An `ExpressiveQuota` names a neutral voice, how many distinct sentences it reads and in which styles
(``duet.data.styles``): every sentence is read once per style, so the styles are parallel (the same words in each,
which is what lets a model and a classifier attribute the differences to the style). A share of those readings
get one or more non-verbal events (``duet.data.nonverbal_sounds``) at distinct word boundaries, written into the
text as tags (``"Well [laughter] I never."``); where they land in the audio comes back from the renderer through
the timing sidecar (:func:`manifest_events`) into the manifest's ``events``, and the style into its ``emotion``.

All choices are seeded by (seed, speaker, sentence), so a plan is reproducible and resumable like any other.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from duet.data.nonverbal_sounds import SOUNDS
from duet.data.sources.expressive import ExpressiveSpeaker, Voice
from duet.data.splice import timed_events
from duet.data.styles import STYLE_NAMES, get_style
from duet.data.timing import Span, read_timing, timing_path
from duet.text.tags import insert_tags, spoken_words


@dataclass(frozen=True)
class ExpressiveQuota:
    voice: Voice  # the neutral voice (a speaker of the other presets)
    sentences: int  # distinct sentences, each read once per style
    styles: tuple[str, ...] = STYLE_NAMES
    event_share: float = 0.5  # share of readings with events (needs a voice that writes word timing)
    max_events: int = 2  # per reading, each at its own word boundary
    events: tuple[str, ...] = SOUNDS

    def __post_init__(self) -> None:
        for name in self.styles:
            get_style(name)
        if not 0.0 <= self.event_share <= 1.0 or self.max_events < 1:
            raise ValueError(f"{self.voice.name}: event_share must be in [0, 1] and max_events at least 1")
        if self.event_share and not speaker(self.voice, self.styles[0]).timed:
            raise ValueError(f"{self.voice.name} writes no word timing, so it cannot carry events (event_share 0)")
        if not set(self.events) <= set(SOUNDS):
            raise ValueError(f"events must be among {', '.join(SOUNDS)}, got {self.events}")


def speaker(voice: Voice, style: str) -> ExpressiveSpeaker:
    """The corpus speaker of ``voice`` in ``style``, e.g. ``piper-joe-happy`` (its wavs/ folder and manifest name)."""
    return ExpressiveSpeaker(f"{voice.name}-{style}", voice, get_style(style))


def with_events(text: str, quota: ExpressiveQuota, rng: random.Random) -> str:
    """``text`` with 0..max_events event tags at distinct word boundaries (0: before the first word)."""
    n = len(spoken_words(text))
    if not n or rng.random() >= quota.event_share:
        return text
    count = min(rng.randint(1, quota.max_events), n + 1)
    boundaries = sorted(rng.sample(range(n + 1), count))
    return insert_tags(text, [(rng.choice(quota.events), k) for k in boundaries])


def plan_readings(quota: ExpressiveQuota, picked: list[tuple[str, str]], seed: int,
                  ) -> list[tuple[str, str, str, ExpressiveSpeaker, str]]:
    """(tagged text, spoken text, text source, speaker, style) of every reading of ``picked`` sentences."""
    out = []
    for text, text_source in picked:
        for style in quota.styles:
            spk = speaker(quota.voice, style)
            tagged = with_events(text, quota, random.Random(f"{seed}:{spk.name}:{text}"))
            out.append((tagged, text, text_source, spk, style))
    return out


def manifest_events(audio_path: str | Path) -> tuple[Span, ...]:
    """The events of a rendered utterance, read from its timing sidecar; () when it has none."""
    path = timing_path(audio_path)
    return timed_events(read_timing(path)) if path.is_file() else ()

