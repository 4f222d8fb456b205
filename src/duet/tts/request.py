"""One utterance to speak, in the shape every way in shares: ``duet speak`` builds one per sentence
(``duet.tts.speaker``), the speech API one per HTTP request (``duet.serve.api``), ``duet eval`` one per test item.

Shape legend: S samples, P prompt frames, K code streams of the codec.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from duet.sampling import SamplingParams
from duet.tts.pace import Pace


@dataclass(frozen=True, eq=False)
class VoicePrompt:
    """A reference clip ready for cloning by infilling (Luna §2.5): its codes, its transcript and its pace.

    Identity semantics (``eq=False``): a prompt is a prepared object, reused across the pieces of one utterance.
    """

    grid: torch.Tensor  # (P, K) clean codes of the clip
    text: str  # what is said in the clip
    pace: float  # the clip's frames / the duration predictor's frames for ``text``, clipped to a sane range


@dataclass(frozen=True, eq=False)
class SynthesisRequest:
    """One utterance to speak. ``reference`` (mono float32 at the codec's sample rate) asks for voice cloning from
    raw audio (the speech API's field); ``prompt`` is a prepared :class:`VoicePrompt` (``Speaker.voice_prompt``).
    ``emotion`` is one of ``duet.text.tokens.EMOTIONS`` (the speech API reads it from its ``instructions``,
    ``duet.text.instructions``); the text may carry inline event tags such as ``[laughter]``. ``pace`` holds the SSML
pauses and rates of the text (``duet.tts.pace``), which a model with aligned text input lays into its durations."""

    text: str
    voice: str | None = None
    emotion: str | None = None  # the utterance-level emotion token's name; None: none (as trained without one)
    speed: float = 1.0
    reference: np.ndarray | None = field(default=None, repr=False)  # (S,)
    params: SamplingParams = SamplingParams()
    prompt: VoicePrompt | None = field(default=None, repr=False)
    pace: Pace | None = None
