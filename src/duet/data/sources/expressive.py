"""A corpus voice read in a speaking style, with non-verbal events spliced in: the renderer of expressive corpora.

One `ExpressiveSpeaker` is a neutral voice (Piper, Festival, Flite or espeak-ng, as in the other presets) and a
`duet.data.styles.Style`. Its items' texts may hold inline event tags (``"Well [laughter] I never."``). For each
batch it:

1. has the voice read the spoken text (tags removed, ``duet.text.tags.split_tags``) with the style's native
   controls (``duet.data.styles``: Piper's length and noise scales, Festival's and Flite's rate, Flite awb's
   target f0, espeak-ng's ``-p -s -a``, SSML pitch range and its ``whisper`` variant), into a scratch folder, with the
   voice's own timing sidecar where it writes one;
2. applies the rest of the style to the audio (``duet.data.voice_effects``; every effect keeps the length);
3. splices each tagged event at its word boundary from that timing (``duet.data.splice``) and writes the audio with
   the rewritten sidecar, whose units then hold the events' times (the manifest reads them from there).

An item with events but no usable timing (espeak-ng's styled readings, which go through the program with SSML,
have none; Festival's is dropped when its segments do not fit the audio) fails with "no word timing", so the planner gives events to timed voices only.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from xml.sax.saxutils import escape

import soundfile as sf

from duet.data.sources.base import RenderItem, require_binary, run_tool, write_audio, write_timed_audio
from duet.data.sources.espeak import EspeakSpeaker
from duet.data.sources.festival import FestivalSpeaker
from duet.data.sources.flite import FliteSpeaker
from duet.data.sources.piper import PiperSpeaker
from duet.data.splice import splice_events
from duet.data.styles import Style
from duet.data.timing import check_timing, read_timing, timing_path
from duet.data.voice_effects import apply_style
from duet.text.tags import split_tags

Voice = FestivalSpeaker | EspeakSpeaker | FliteSpeaker | PiperSpeaker

PIPER_NOISE = (0.667, 0.8)  # joe's own noise_scale and noise_w (its .onnx.json), scaled by a style
# Median f0 (Hz) of a Flite voice that honours int_f0_target_mean (awb; measured with pYIN); rms ignores it
# (103.6 Hz at a target of 104 and of 140), so other voices are shifted by sox afterwards like Piper.
FLITE_F0 = {"awb": 122.0}
ESPEAK_PITCH_PER_SEMITONE = 6.0  # -p units: en-us measured 82 / 98 / 120 Hz at -p 30 / 50 / 70


def item_seed(seed: int, text: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}\x00style\x00{text}".encode()).digest()[:8], "little")


@dataclass(frozen=True)
class ExpressiveSpeaker:
    name: str
    voice: Voice  # the neutral voice
    style: Style
    seed: int = 0

    @property
    def language(self) -> str:
        return self.voice.language

    @property
    def source(self) -> str:
        return self.voice.source

    @property
    def timed(self) -> bool:
        """Whether the voice writes the word timing that events are spliced by."""
        return isinstance(self.voice, PiperSpeaker | FestivalSpeaker) or (
            isinstance(self.voice, FliteSpeaker) and self.voice.timed)

    def _native(self) -> tuple[Voice, Style]:
        """The voice with the style's native controls, and what is left to do to its audio."""
        v, s = self.voice, self.style
        if isinstance(v, PiperSpeaker):
            noise = v.noise_scale if v.noise_scale is not None else PIPER_NOISE[0]
            noise_w = v.noise_w if v.noise_w is not None else PIPER_NOISE[1]
            styled = replace(v, length_scale=v.length_scale / s.rate, noise_scale=noise * s.piper_noise,
                             noise_w=noise_w * s.piper_noise)
            return styled, s  # pitch by sox afterwards
        if isinstance(v, FestivalSpeaker):
            return replace(v, rate=v.rate * s.rate, semitones=v.semitones + s.semitones), replace(s, semitones=0.0)
        if isinstance(v, FliteSpeaker):
            f0 = FLITE_F0.get(v.voice) if v.pitch is None else v.pitch
            if f0 is None:
                return replace(v, rate=v.rate * s.rate), s
            pitch = f0 * 2 ** (s.semitones / 12) if s.semitones else v.pitch
            return replace(v, rate=v.rate * s.rate, pitch=pitch), replace(s, semitones=0.0)
        pitch = min(99, max(0, round(v.pitch + ESPEAK_PITCH_PER_SEMITONE * s.semitones)))
        variant = ("whisperf" if v.variant.startswith("f") else "whisper") if s.whisper else v.variant
        styled = replace(v, pitch=pitch, rate=round(v.rate * s.rate), variant=variant)
        return styled, replace(s, semitones=0.0, gain_db=0.0, whisper=False)  # -a and the variant do those

    def check(self) -> None:
        self.voice.check()
        if self.style.semitones and isinstance(self.voice, PiperSpeaker | FestivalSpeaker | FliteSpeaker):
            require_binary("sox", "sox")

    def render(self, items: Sequence[RenderItem]) -> list[str | None]:
        voice, post = self._native()
        errors: list[str | None] = []
        with tempfile.TemporaryDirectory(prefix="duet-expressive-") as tmpdir:
            tmp = Path(tmpdir)
            tagged = [split_tags(item.text) for item in items]
            plain = [RenderItem(item.id, t.spoken, str(tmp / f"{i}.wav"), item.origin)
                     for i, (item, t) in enumerate(zip(items, tagged, strict=True))]
            if isinstance(voice, EspeakSpeaker):
                first = [self._espeak(voice, item) for item in plain]
            else:
                first = voice.render(plain)
            for item, raw, t, err in zip(items, plain, tagged, first, strict=True):
                errors.append(err if err is not None else self._finish(item, Path(raw.out), t.events, post))
        return errors

    def _espeak(self, voice: EspeakSpeaker, item: RenderItem) -> str | None:
        """espeak-ng with the style's amplitude and SSML pitch range (EspeakSpeaker itself reads plain text)."""
        amplitude = min(200, max(1, round(100 * 10 ** (self.style.gain_db / 20))))
        ssml = f'<speak><prosody range="{self.style.espeak_range}">{escape(item.text)}</prosody></speak>'
        cmd = ["espeak-ng", "-m", "-v", voice.voice_spec, "-p", str(voice.pitch), "-s", str(voice.rate),
               "-a", str(amplitude), "-w", item.out, "--stdin"]
        return run_tool(cmd, timeout=60, stdin=ssml)

    def _finish(self, item: RenderItem, raw: Path, events: Sequence[tuple[str, int]], post: Style) -> str | None:
        try:
            audio, sr = sf.read(str(raw), dtype="float32")
        except Exception as err:  # soundfile raises several types
            return f"unreadable {self.source} output: {item.id}: {err}"
        sidecar = timing_path(raw)
        timing = read_timing(sidecar) if sidecar.is_file() else None
        seed = item_seed(self.seed, item.text)
        audio = apply_style(audio.reshape(-1) if audio.ndim == 1 else audio.mean(axis=1), sr, post,
                            shift_pitch=bool(post.semitones), seed=seed)
        if not events:
            return write_timed_audio(item.out, audio, sr, timing) if timing else write_audio(item.out, audio, sr)
        if timing is None:
            return f"no word timing to splice events into: {item.id}"
        spliced = splice_events(audio, sr, timing, events, seed=seed)
        problems = check_timing(spliced.timing, len(spliced.audio) / sr)
        if problems:
            return f"bad timing after splicing: {item.id}: {problems[0]}"
        return write_timed_audio(item.out, spliced.audio, sr, spliced.timing)
