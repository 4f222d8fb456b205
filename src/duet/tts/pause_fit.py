"""A requested pause made its exact length in the audio, keeping the model's own pause around it.

An SSML break between two words is laid into the model's durations (``duet.tts.pace_layout``): the layout's gap
between the two words is the break, but the model's own timing is off at each edge of it (the pause it makes is a
median 30-35 ms and at the 95th percentile about 100 ms off the break; ``benchmarks/results/timestamps.md``). So
after generation the pause is measured and fitted:

1. the quiet stretch is found by an energy threshold, as a listener's stopwatch (and ``duet.eval.pauses``) would
   find it: ``window``-second frames more than ``below_db`` under the loudest frame of the piece; of the quiet runs
   that overlap the layout's gap widened by ``reach`` on each side, the longest;
2. its middle is lengthened (zeros inserted, the quiet audio on either side faded to them over ``crossfade``) or
   shortened (samples removed from the middle, the two sides crossfaded) so that the run lasts the break; the
   model's transitions into and out of the pause stay as it made them;
3. where no quiet run is found (the model ran the two words together), the break's silence is spliced at the
   quietest frame of the layout's gap, as silence between pieces is.

Between two pieces (a break where one sentence ends and the next begins) the silence the caller puts between them
is sized from the quiet each piece already has at that edge (:func:`quiet_edges`), so that the whole quiet stretch
is the break.

Every time of the piece after an edit moves with the audio (:meth:`Edit.moved`), so word and phone timings stay on
the samples they were on, in order, inside the audio.

Shape legend: s samples.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from duet.tts.timestamps import WordTiming


@dataclass(frozen=True)
class PauseFitConfig:
    window: float = 0.01  # seconds per energy frame
    below_db: float = -40.0  # quiet: this far under the piece's loudest frame
    reach: float = 0.2  # seconds either side of the layout's gap in which the quiet run may lie
    crossfade: float = 0.005  # seconds of fade at each seam


@dataclass(frozen=True)
class Edit:
    """Samples inserted or removed at one place of a piece's audio, in seconds of the audio before the edit."""

    at: float  # where the inserted samples go, or where the removed ones began
    seconds: float  # > 0 inserted, < 0 removed

    def moved(self, t: float) -> float:
        """Where time ``t`` of the audio before the edit lies after it (a time inside removed audio: where it was)."""
        if self.seconds >= 0:
            return t + self.seconds if t >= self.at else t
        if t <= self.at:
            return t
        return max(self.at, t + self.seconds)


@dataclass(frozen=True)
class FittedPause:
    """How one break was fitted."""

    seconds: float  # requested
    found: float  # the quiet run's length before the fit (0: none found, the break spliced)
    edit: Edit


def quiet_runs(audio: np.ndarray, sample_rate: int, config: PauseFitConfig = PauseFitConfig(),
               loudest: float | None = None) -> list[tuple[int, int]]:
    """Every run of quiet frames as (first sample, end sample); ``loudest``: the reference frame RMS (default the
    clip's own loudest frame, at least -60 dBFS)."""
    n = max(1, int(round(sample_rate * config.window)))
    frames = len(audio) // n
    if frames == 0:
        return []
    rms = np.sqrt(np.mean(audio[: frames * n].astype(np.float64).reshape(frames, n) ** 2, axis=1) + 1e-12)  # (F,)
    top = float(rms.max()) if loudest is None else loudest
    # a clip whose loudest frame is under -60 dBFS has nothing to hear: measured against that level, it is quiet
    quiet = 20 * np.log10(rms / max(top, 1e-3)) < config.below_db
    runs, start = [], None
    for i, q in enumerate(quiet):
        if q and start is None:
            start = i
        elif not q and start is not None:
            runs.append((start * n, i * n))
            start = None
    if start is not None:
        runs.append((start * n, frames * n))
    return runs


def fit_pauses(audio: np.ndarray, sample_rate: int, gaps: Sequence[tuple[float, float, float]],
               config: PauseFitConfig = PauseFitConfig()) -> tuple[np.ndarray, list[FittedPause]]:
    """A piece's audio (s,) and its breaks as the layout put them ((end of the word before, start of the word after,
    seconds), in seconds, in order) -> the audio with each pause fitted (module docstring) and the fits, in the
    order they were made (from the last break to the first), which is the order :func:`retimed` applies them."""
    audio = np.asarray(audio, dtype=np.float32)
    runs = quiet_runs(audio, sample_rate, config)
    fitted: list[FittedPause] = []
    limit = len(audio)  # an edit stays left of the one made before it (to its right)
    for start, end, seconds in sorted(gaps, reverse=True):
        lo = int((start - config.reach) * sample_rate)
        hi = int((end + config.reach) * sample_rate)
        near = [(a, min(b, limit)) for a, b in runs if a <= hi and b >= lo and a < limit]
        near = [(a, b) for a, b in near if b > a]
        target = int(round(seconds * sample_rate))
        fade = max(1, int(round(config.crossfade * sample_rate)))
        if near:
            a, b = max(near, key=lambda r: r[1] - r[0])
            audio, edit = _resize(audio, a, b, target, fade, sample_rate)
            found = (b - a) / sample_rate
        else:
            at = min(_quietest(audio, sample_rate, start, end, config), limit)
            audio = _insert(audio, at, target, fade)
            edit, found = Edit(at / sample_rate, target / sample_rate), 0.0
        fitted.append(FittedPause(seconds, found, edit))
        limit = int(round(edit.at * sample_rate))
    return audio, fitted


def quiet_edges(audio: np.ndarray, sample_rate: int, config: PauseFitConfig = PauseFitConfig()) -> tuple[float, float]:
    """Seconds of quiet (the same threshold, against the clip's loudest frame) at the start and at the end of a
    piece's audio (s,): how much of a pause between two pieces each side already makes."""
    runs = quiet_runs(audio, sample_rate, config)
    n = max(1, int(round(sample_rate * config.window)))
    whole = len(audio) // n * n  # the frames end here; a shorter rest after them goes with the last frame
    lead = runs[0][1] / sample_rate if runs and runs[0][0] == 0 else 0.0
    trail = (len(audio) - runs[-1][0]) / sample_rate if runs and runs[-1][1] == whole else 0.0
    if runs and runs[0] == (0, whole):  # all quiet: the piece is its own pause, counted once
        lead, trail = len(audio) / sample_rate, 0.0
    return lead, trail


def retimed(words: Sequence[WordTiming], fits: Sequence[FittedPause], seconds: float) -> tuple[WordTiming, ...]:
    """``words`` of a piece moved with its audio through ``fits`` (from :func:`fit_pauses`), clipped to the
    fitted audio's ``seconds``."""
    def move(t: float) -> float:
        for fit in fits:
            t = fit.edit.moved(t)
        return min(max(t, 0.0), seconds)

    return tuple(replace(w, start=move(w.start), end=move(w.end),
                         phones=tuple(replace(p, start=move(p.start), end=move(p.end)) for p in w.phones))
                 for w in words)


def _resize(audio: np.ndarray, a: int, b: int, target: int, fade: int, sample_rate: int) -> tuple[np.ndarray, Edit]:
    """The quiet run [a, b) made ``target`` samples long in its middle."""
    middle = (a + b) // 2
    if target >= b - a:
        n = target - (b - a)
        return _insert(audio, middle, n, fade), Edit(middle / sample_rate, n / sample_rate)
    n = min(b - a - target, b - a - fade)  # samples removed; the crossfade stays inside the run
    if n <= 0:
        return audio, Edit(middle / sample_rate, 0.0)
    s = max(a, middle - (n + fade) // 2)
    ramp = np.linspace(0.0, 1.0, fade, dtype=np.float32)
    seam = audio[s:s + fade] * (1 - ramp) + audio[s + n:s + n + fade] * ramp
    out = np.concatenate([audio[:s], seam, audio[s + n + fade:]])
    return out, Edit(s / sample_rate, -n / sample_rate)


def _insert(audio: np.ndarray, at: int, n: int, fade: int) -> np.ndarray:
    """``n`` zeros at sample ``at``, the audio faded out into them and in after them over ``fade`` samples."""
    if n <= 0:
        return audio
    left, right = audio[:at].copy(), audio[at:].copy()
    f = min(fade, len(left))
    if f:
        left[len(left) - f:] *= np.linspace(1.0, 0.0, f, dtype=np.float32)
    f = min(fade, len(right))
    if f:
        right[:f] *= np.linspace(0.0, 1.0, f, dtype=np.float32)
    return np.concatenate([left, np.zeros(n, np.float32), right])


def _quietest(audio: np.ndarray, sample_rate: int, start: float, end: float, config: PauseFitConfig) -> int:
    """The middle sample of the quietest energy frame between ``start`` and ``end`` seconds (the nearest frame when
    the two are one point)."""
    n = max(1, int(round(sample_rate * config.window)))
    first = max(0, min(int(start * sample_rate) // n, len(audio) // n - 1))
    last = max(first, min(int(end * sample_rate) // n, len(audio) // n - 1))
    if len(audio) < n:
        return min(len(audio), int(start * sample_rate))
    frames = audio[first * n:(last + 1) * n].astype(np.float64).reshape(-1, n)  # (F, n)
    best = first + int(np.argmin(np.mean(frames ** 2, axis=1)))
    return best * n + n // 2
