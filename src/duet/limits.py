"""The bounds on a request's numbers and their one check (and the one check of its text's encoding), one copy for
every way in: ``duet speak`` (``duet.tts.cli``), the speech API (``duet.serve.api``) and so the vLLM path behind it,
all through ``duet.sampling.SamplingParams``. A value outside them is refused before any model runs."""

from __future__ import annotations

import math
from typing import Any, Callable

MAX_TOP_K = 65_536  # codes kept per channel or cell; 0 = off
MAX_STEPS = 128  # Luna's refinement steps (32 by default); more buys nothing a listener hears and costs minutes
MAX_TEMPERATURE = 10.0  # sampling temperature in [0, MAX_TEMPERATURE]; 0 = greedy
MIN_SPEED, MAX_SPEED = 0.25, 4.0  # speaking rate of a model with a duration predictor; 1 = as predicted
SEED_LIMIT = 2**63  # seeds in [0, SEED_LIMIT)

# field -> (whether a value is inside its bound, the bound in words)
_BOUNDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "temperature": (lambda v: math.isfinite(v) and 0.0 <= v <= MAX_TEMPERATURE,
                    f"a number in [0, {MAX_TEMPERATURE:g}] (0 = greedy)"),
    "top_k": (lambda v: 0 <= v <= MAX_TOP_K, f"in [0, {MAX_TOP_K}] (0 = off)"),
    "top_p": (lambda v: 0.0 < v <= 1.0, "in (0, 1]"),
    "stop_threshold": (lambda v: 0.0 < v < 1.0, "in (0, 1)"),
    "max_frames": (lambda v: v >= 1, ">= 1"),
    "steps": (lambda v: 1 <= v <= MAX_STEPS, f"a positive integer up to {MAX_STEPS} (8, 16 or 32 are typical)"),
    "cfg_scale": (lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0 (1 = no guidance)"),
    "seed": (lambda v: 0 <= v < SEED_LIMIT, "in [0, 2**63)"),
    "speed": (lambda v: math.isfinite(v) and MIN_SPEED <= v <= MAX_SPEED,
              f"a number in [{MIN_SPEED:g}, {MAX_SPEED:g}] (1 = as predicted, 2 = twice as fast)"),
}


def out_of_bounds(field: str, value: Any, what: str | None = None) -> str | None:
    """Why ``value`` is outside the bound of the request field ``field`` (temperature, top_k, top_p,
    stop_threshold, max_frames, steps, cfg_scale, seed, speed), or None. ``what`` names it in the message (default:
    the field; ``duet speak`` passes its flag)."""
    inside, bound = _BOUNDS[field]
    return None if inside(value) else f"{what or field} must be {bound}, got {value}"


def invalid_unicode(text: str, what: str) -> str | None:
    """Why ``text`` cannot be spoken as Unicode, or None: a lone surrogate, which JSON and Python strings allow and no
    text tool downstream does. ``what`` names the text in the message ("input", "the text")."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return f"{what} is not valid Unicode (a lone surrogate at character {err.start})"
    return None
