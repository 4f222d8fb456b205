"""Utterance-level speaking styles as prosody presets, and what each synthesiser is told for one.

A style is named after its emotion token (``duet.text.tokens.EMOTIONS``) and is written relative to the voice's
neutral reading: a pitch shift in semitones, a speaking-rate factor, a pitch-range setting, a loudness change and a
spectral tilt, plus a whisper flag. Each synthesiser takes what it can natively and the rest is done to its audio
afterwards (``duet.data.voice_effects``), always keeping the length, so the word timing stays valid:

| control | Piper (VITS) | espeak-ng | Festival | Flite |
| --- | --- | --- | --- | --- |
| rate | `length_scale` | `-s` | `Duration_Stretch` / HTS `-r` | `duration_stretch` |
| pitch | sox `pitch` after | `-p` | sox `pitch` after | `int_f0_target_mean` (awb; sox for the others) |
| range | `noise_scale`, `noise_w` (more varied prosody) | SSML `prosody range` | - | - |
| energy | gain after | `-a` | gain after | gain after |
| tilt, whisper | after | after (tilt), `+whisper` variant | after | after |

These are acted, not felt, styles: a "sad" reading is lower, slower, quieter and darker, "angry" louder, faster
and brighter, "happy" higher, wider and a little faster, "surprised" much higher and wider, "whisper" unvoiced.
That is enough for a prosodic classifier to tell them apart (``duet.eval.emotion``) and for a model to learn an
emotion token that changes those measures.
"""

from __future__ import annotations

from dataclasses import dataclass

from duet.errors import DuetError
from duet.text.tokens import EMOTIONS


@dataclass(frozen=True)
class Style:
    name: str  # one of duet.text.tokens.EMOTIONS
    semitones: float = 0.0  # pitch shift
    rate: float = 1.0  # speaking-rate factor, > 1 is faster
    gain_db: float = 0.0  # loudness change
    tilt: float = 0.0  # spectral tilt: > 0 brighter (tense), < 0 darker (lax); a first-order shelf, -1 .. 1
    espeak_range: str = "medium"  # SSML prosody range: x-low, low, medium, high, x-high
    piper_noise: float = 1.0  # factor on Piper's noise_scale and noise_w: > 1 gives more varied prosody
    whisper: bool = False  # replace the voicing by noise through the same spectral envelope

    def __post_init__(self) -> None:
        if self.name not in EMOTIONS:
            raise DuetError(f"style {self.name!r} is not an emotion token; choose from {', '.join(EMOTIONS)}")
        if self.rate <= 0 or not -1.0 <= self.tilt <= 1.0:
            raise DuetError(f"style {self.name}: rate must be positive and tilt in [-1, 1]")


STYLES: dict[str, Style] = {
    s.name: s
    for s in (
        Style("neutral"),
        Style("happy", semitones=3.0, rate=1.1, gain_db=2.0, tilt=0.2, espeak_range="high", piper_noise=1.3),
        Style("sad", semitones=-3.0, rate=0.8, gain_db=-6.0, tilt=-0.5, espeak_range="x-low", piper_noise=0.6),
        Style("angry", semitones=1.0, rate=1.15, gain_db=5.0, tilt=0.6, espeak_range="high", piper_noise=1.2),
        Style("surprised", semitones=5.0, rate=1.0, gain_db=3.0, tilt=0.3, espeak_range="x-high", piper_noise=1.5),
        Style("whisper", rate=0.95, gain_db=-4.0, whisper=True),
    )
}
STYLE_NAMES: tuple[str, ...] = tuple(STYLES)


def get_style(name: str) -> Style:
    if name not in STYLES:
        raise DuetError(f"no speaking style {name!r}; choose from {', '.join(STYLE_NAMES)}")
    return STYLES[name]
