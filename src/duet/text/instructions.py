"""A speech request's free-text ``instructions`` read as one utterance-level emotion (``duet.text.tokens.EMOTIONS``).

Luna's instruction context holds one emotion token (Luna-TTS §2.3), not free text, so an instruction is taken only
when it names exactly one emotion and says nothing else a token could not carry:

- an emotion's name (``"happy"``), or a short instruction of at most ``MAX_WORDS`` words in which every word that
  names an emotion names the same one (``"speak happily"``, ``"in a sad voice"``, ``"Whisper it"``); the words of
  each emotion are its name and its adjectives and adverbs (``EMOTION_WORDS``), compared case-folded;
- refused (:class:`~duet.errors.InvalidRequest` naming the choices): no emotion word, two different emotions
  (``"happy then sad"``), a negation (``"not angry"`` would otherwise read as angry), or a longer text;
- empty or blank: no emotion.
"""

from __future__ import annotations

import re

from duet.errors import InvalidRequest
from duet.text.tokens import EMOTIONS

MAX_WORDS = 8  # "please say this in a calm happy voice" fits; a paragraph of direction does not

# Spellings of each emotion beyond its name: adjectives and adverbs a short instruction uses.
EMOTION_WORDS: dict[str, tuple[str, ...]] = {
    "neutral": ("neutral", "neutrally", "plain", "plainly"),
    "happy": ("happy", "happily", "cheerful", "cheerfully", "joyful", "joyfully", "glad", "gladly"),
    "sad": ("sad", "sadly", "sorrowful", "sorrowfully", "unhappy", "unhappily"),
    "angry": ("angry", "angrily", "furious", "furiously", "mad"),
    "surprised": ("surprised", "surprisedly", "astonished", "amazed"),
    "fearful": ("fearful", "fearfully", "afraid", "scared", "frightened"),
    "disgusted": ("disgusted", "disgustedly", "disgust"),
    "whisper": ("whisper", "whispers", "whispered", "whispering", "whispery", "whisperingly"),
}
_EMOTION_OF: dict[str, str] = {word: name for name, words in EMOTION_WORDS.items() for word in words}
NEGATIONS = frozenset({"not", "no", "never", "nor", "without", "less", "don't", "dont", "doesn't", "isn't", "aren't",
                       "neither", "nothing", "avoid"})

_WORD_RE = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")  # letters, with one inner apostrophe (don't)


def _refuse(why: str) -> InvalidRequest:
    return InvalidRequest(f"{why}; instructions name one emotion, e.g. 'happy' or 'speak happily': one of "
                          f"{', '.join(EMOTIONS)}", param="instructions", code="invalid_value")


def emotion_of_instructions(instructions: str | None) -> str | None:
    """The one emotion ``instructions`` name (module docstring), None when they are empty or blank."""
    if instructions is None or not instructions.strip():
        return None
    if len(instructions.split()) > MAX_WORDS:
        raise _refuse(f"instructions are longer than {MAX_WORDS} words")
    words = _WORD_RE.findall(instructions.casefold())
    negations = sorted(NEGATIONS.intersection(words))
    if negations:
        raise _refuse(f"instructions with a negation ({', '.join(negations)}) cannot be read as an emotion")
    named = sorted({_EMOTION_OF[w] for w in words if w in _EMOTION_OF}, key=EMOTIONS.index)
    if not named:
        raise _refuse(f"instructions {instructions.strip()!r} name no emotion")
    if len(named) > 1:
        raise _refuse(f"instructions name {len(named)} emotions ({', '.join(named)}), a request takes one")
    return named[0]
