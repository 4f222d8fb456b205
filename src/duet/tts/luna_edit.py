"""Speech editing with a Luna runtime (Luna-TTS report §2.5): regenerate a stretch of a recording, under its own
transcript or a new one, and leave the rest of it as it was.

The recording is encoded by the runtime's codec into a grid (T, Q). The seconds [start, end) become the frames
[a, b) = [floor(start x fps), ceil(end x fps)) (b at most T). ``duet.luna.infill.edit`` then masks them and denoises
the hole with the whole transcript as the text condition. With the same transcript the hole keeps b - a frames; with
a new transcript it gets ``edit_span_frames`` frames: the old span plus the difference between the duration
predictor's lengths of the new and the old transcript (the unedited words are assumed to keep their duration), at
least one frame. ``new_text`` is the whole new transcript, not only the replaced words: Luna reads the whole
utterance's text and finds where in it the hole lies.

The codes outside the span are the recording's own, bit for bit (``EditedSpeech.grid``), and so are the samples: the
audio is the recording itself up to the span, the codec's decode of the edited grid over the span, and the recording
again after it (shifted by the span's change in length), joined by linear crossfades of ``CROSSFADE_SECONDS`` laid
just outside the span (``splice``). Beyond that margin the edited audio is the input, sample for sample. Bad input is a DuetError before any decoding: an empty transcript, a silent, empty or non-finite
recording, one longer than the runtime's ``max_frames``, a span that is empty or outside the recording, or a text
that leaves no room for the grid in the model's positions.

Shape legend: S text ids (with SOT/EOT), T frames, Q codebooks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from duet.audio import resample
from duet.errors import DuetError
from duet.finish import STOP
from duet.luna.decode import with_overrides
from duet.luna.infill import check_prompt_audio, edit, edit_span_frames
from duet.text.prompts import luna_prompt
from duet.tts.runtime import check_emotion
from duet.tts.speech import Speech

CROSSFADE_SECONDS = 0.02  # each join of recording and regenerated audio, laid outside the span


class EditableLuna(Protocol):
    """What editing needs of a Luna model (``duet.tts.luna.LunaRuntime`` is one; ``Speaker.edit`` passes it)."""

    name: str
    sample_rate: int
    config: Any  # LunaRuntimeConfig: decode, max_frames, language
    codec: Any
    tokenizer: Any
    model: Any  # LunaModel
    traits: Any  # FamilyTraits: the emotions it takes

    def encode_grid(self, audio: np.ndarray, sample_rate: int | None = None) -> torch.Tensor: ...

    def decode_grid(self, grid: torch.Tensor) -> np.ndarray: ...

    def predicted_frames(self, ids: list[int]) -> float: ...

    def layout(self, ids: list[int], frames: int) -> torch.Tensor | None: ...


@dataclass(frozen=True)
class EditedSpeech:
    speech: Speech  # the whole edited utterance
    grid: torch.Tensor  # (T', Q) its codes: the recording's outside ``span``
    span: tuple[int, int]  # the regenerated frames [a, a + n) of ``grid``
    frame_rate: float  # codec frames per second

    @property
    def span_seconds(self) -> tuple[float, float]:
        """Where the regenerated stretch lies in ``speech``, in seconds."""
        return self.span[0] / self.frame_rate, self.span[1] / self.frame_rate


def span_frames_of(span_seconds: tuple[float, float], seconds: float, frame_rate: float,
                   num_frames: int) -> tuple[int, int]:
    """[start, end) in seconds of a ``seconds`` long recording -> frames [a, b) covering it (b at most
    ``num_frames``). A span that is empty, not finite or outside the recording is a DuetError."""
    start, end = (float(s) for s in span_seconds)
    if not (math.isfinite(start) and math.isfinite(end) and 0.0 <= start < end <= seconds + 1e-6):
        raise DuetError(f"the editing span {start:g}-{end:g} s must be non-empty and lie inside the recording "
                        f"(0-{seconds:.2f} s)")
    a = math.floor(start * frame_rate)
    b = min(num_frames, math.ceil(end * frame_rate))
    if a >= b:
        raise DuetError(f"the editing span {start:g}-{end:g} s falls after the recording's last whole codec frame "
                        f"({num_frames / frame_rate:.2f} s)")
    return a, b


def splice(recording: np.ndarray, decoded: np.ndarray, start: int, old_end: int, new_end: int,
           fade: int) -> np.ndarray:
    """The edited waveform: ``recording`` (L,) with its samples [start, old_end) replaced by ``decoded``'s
    [start, new_end) ((M,), the decode of the edited grid, whose samples before ``start`` and after ``new_end``
    reconstruct the recording's before ``start`` and after ``old_end``). Each join is a linear crossfade of up to
    ``fade`` samples outside the span: the recording's [start - fade, start) fades into the decode, the decode's
    [new_end, new_end + fade) into the recording's [old_end, old_end + fade). -> (new_end + L - old_end,) float32."""
    old_end = min(old_end, len(recording))
    f0 = min(fade, start)
    f1 = max(0, min(fade, len(recording) - old_end, len(decoded) - new_end))
    into = np.linspace(0.0, 1.0, f0 + 2, dtype=np.float32)[1:-1]  # (f0,) strictly between 0 and 1
    out_of = np.linspace(1.0, 0.0, f1 + 2, dtype=np.float32)[1:-1]  # (f1,)
    parts = (recording[:start - f0],
             recording[start - f0:start] * (1 - into) + decoded[start - f0:start] * into,
             decoded[start:new_end],
             decoded[new_end:new_end + f1] * out_of + recording[old_end:old_end + f1] * (1 - out_of),
             recording[old_end + f1:])
    return np.concatenate(parts).astype(np.float32)


def edit_speech(luna: EditableLuna, audio: np.ndarray | torch.Tensor, text: str,
                span_seconds: tuple[float, float], *, new_text: str | None = None, sample_rate: int | None = None,
                seed: int | None = None, steps: int | None = None, temperature: float | None = None,
                top_k: int | None = None, cfg_scale: float | None = None,
                emotion: str | None = None) -> EditedSpeech:
    """Regenerate ``span_seconds`` of a recording (S,) mono float (resampled from ``sample_rate`` if given) whose
    transcript is ``text``, under ``new_text`` (the whole new transcript) or ``text``, with ``emotion``'s token in
    the instruction context of both transcripts (as ``speak`` puts it). See the module doc."""
    if not text or not text.strip():
        raise DuetError("editing needs the recording's transcript (text); it is empty")
    if new_text is not None and not new_text.strip():
        raise DuetError("the new transcript is empty (leave it out to regenerate the span with the same words)")
    if emotion is not None:
        check_emotion(emotion, luna.name, luna.traits)
    decode = with_overrides(luna.config.decode, steps=steps, temperature=temperature, top_k=top_k,
                            cfg_scale=cfg_scale)
    recording = check_prompt_audio(audio, what="the recording to edit")
    recording = resample(recording, sample_rate or luna.sample_rate, luna.sample_rate)  # once: encoded and spliced
    seconds = len(recording) / luna.sample_rate
    frame_rate = luna.codec.frame_rate
    if seconds * frame_rate > luna.config.max_frames:
        raise DuetError(f"the recording is {seconds:.1f} s long; {luna.name} edits at most "
                        f"{luna.config.max_frames / frame_rate:g} s")
    grid = luna.encode_grid(recording)  # (T, Q)
    a, b = span_frames_of(span_seconds, seconds, frame_rate, grid.shape[0])

    language = luna.config.language
    old_ids = luna_prompt(text, luna.tokenizer, language=language, emotion=emotion)
    ids = old_ids if new_text is None else luna_prompt(new_text, luna.tokenizer, language=language, emotion=emotion)
    n = b - a if new_text is None else edit_span_frames((a, b), luna.predicted_frames(old_ids),
                                                        luna.predicted_frames(ids))
    positions = len(ids) + grid.shape[0] - (b - a) + n
    if positions > luna.model.config.backbone.max_positions:
        raise DuetError(f"the transcript and the recording are too long for {luna.name} ({positions} positions, "
                        f"at most {luna.model.config.backbone.max_positions}): edit a shorter recording")

    generator = None if seed is None else torch.Generator().manual_seed(seed)
    text_ids = torch.tensor(ids, device=luna.model.device)  # (S,)
    # an aligned model lays the transcript over the edited grid by its predicted durations, stretched to fit
    layout = luna.layout(ids, grid.shape[0] - (b - a) + n)
    result = edit(luna.model, text_ids, grid, (a, b), n, decode, generator=generator,
                  durations=None if layout is None else layout[0])
    spf = luna.codec.samples_per_frame
    start, new_end = (f * spf for f in result.span)
    joined = splice(recording, luna.decode_grid(result.grid), start, b * spf, new_end,
                    round(CROSSFADE_SECONDS * luna.sample_rate))
    speech = Speech(joined, luna.sample_rate, ((new_text or text).strip(),), (STOP,))
    return EditedSpeech(speech, result.grid, result.span, frame_rate)
