"""The bounds on a request's numbers (and the one check of its text's encoding), one copy for every way in: ``duet speak`` (``duet.tts.cli``), the speech API
(``duet.serve.schemas``) and so the vLLM path behind it. A value outside them is refused before any model runs."""

from __future__ import annotations

MAX_TOP_K = 65_536  # codes kept per channel or cell; 0 = off
MAX_STEPS = 128  # Luna's refinement steps (32 by default); more buys nothing a listener hears and costs minutes
MAX_TEMPERATURE = 10.0  # sampling temperature in [0, MAX_TEMPERATURE]; 0 = greedy
MIN_SPEED, MAX_SPEED = 0.25, 4.0  # speaking rate of a model with a duration predictor; 1 = as predicted
SEED_LIMIT = 2**63  # seeds in [0, SEED_LIMIT)


def invalid_unicode(text: str, what: str) -> str | None:
    """Why ``text`` cannot be spoken as Unicode, or None: a lone surrogate, which JSON and Python strings allow and no
    text tool downstream does. ``what`` names the text in the message ("input", "the text")."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return f"{what} is not valid Unicode (a lone surrogate at character {err.start})"
    return None
