"""duet's service tokens: the one module that names them and the one place their ids are looked up.

Every tokenizer duet builds (the offline Qwen3 one in ``qwen.py``, the small BPE in ``bpe.py``) appends
``SERVICE_TOKENS`` after its own vocabulary, in this order, as single added tokens. Model code never writes a
numeric id: it calls :func:`service_ids` on its tokenizer and reads the fields of the returned
:class:`ServiceIds`.

The inventory:
- control: start of text, end of text, start of speech (Gepard §2.1 / §4.1.1 "service SOT/EOT/SOS tokens"),
  and a padding token (the small BPE has no other; Qwen3 pads with ``<|endoftext|>``, duet pads with ``<|pad|>``
  everywhere so that collate code does not depend on the tokenizer);
- emotions: one utterance-level emotion token in the instruction context (Luna-TTS §2.3);
- non-verbal vocalisations: inline event tokens written in the text where the event happens, e.g.
  ``"well [laughter] no"`` (Luna-TTS §2.3; §6.2 scores breath, cough, laughter and sigh);
- speakers: ``<|spk_0|>`` .. ``<|spk_{N-1}|>`` for multi-speaker models trained without voice cloning.

The order is part of every trained checkpoint: reordering or inserting a token moves the ids after it and
invalidates those checkpoints. Speakers come last so that their count can grow without moving any other id.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from duet.errors import DuetError

SOT = "<|sot|>"  # start of text
EOT = "<|eot|>"  # end of text
SOS = "<|sos|>"  # start of speech: the audio region begins after it
PAD = "<|pad|>"
CONTROL_TOKENS: tuple[str, ...] = (SOT, EOT, SOS, PAD)

EMOTIONS: tuple[str, ...] = ("neutral", "happy", "sad", "angry", "surprised", "fearful", "disgusted", "whisper")
NONVERBALS: tuple[str, ...] = (
    "breath",
    "cough",
    "laughter",
    "sigh",
    "gasp",
    "sniff",
    "cry",
    "yawn",
    "clear_throat",
    "hum",
)
NUM_SPEAKER_TOKENS = 128  # fits Qwen3's padded embedding with room to spare (see qwen.py)


def emotion_token(name: str) -> str:
    if name not in EMOTIONS:
        raise DuetError(f"unknown emotion {name!r}; choose one of: {', '.join(EMOTIONS)}")
    return f"<|emo_{name}|>"


def nonverbal_token(name: str) -> str:
    # Square brackets rather than <|...|> because users type these inline in the text they want spoken.
    if name not in NONVERBALS:
        raise DuetError(f"unknown non-verbal event {name!r}; choose one of: {', '.join(NONVERBALS)}")
    return f"[{name}]"


def speaker_token(index: int) -> str:
    if not 0 <= index < NUM_SPEAKER_TOKENS:
        raise DuetError(f"speaker index {index} is outside 0..{NUM_SPEAKER_TOKENS - 1}")
    return f"<|spk_{index}|>"


EMOTION_TOKENS: tuple[str, ...] = tuple(emotion_token(n) for n in EMOTIONS)
NONVERBAL_TOKENS: tuple[str, ...] = tuple(nonverbal_token(n) for n in NONVERBALS)
SPEAKER_TOKENS: tuple[str, ...] = tuple(speaker_token(i) for i in range(NUM_SPEAKER_TOKENS))

# The fixed order every tokenizer appends them in.
SERVICE_TOKENS: tuple[str, ...] = CONTROL_TOKENS + EMOTION_TOKENS + NONVERBAL_TOKENS + SPEAKER_TOKENS
# Any one of them, captured: ``SERVICE_TOKEN_RE.split(text)`` keeps the tokens between the pieces of text.
SERVICE_TOKEN_RE = re.compile("(" + "|".join(re.escape(t) for t in SERVICE_TOKENS) + ")")


def _lookup(tokenizer: object) -> Callable[[str], int | None]:
    """A token -> id function for a ``tokenizers.Tokenizer`` or a transformers tokenizer."""
    if hasattr(tokenizer, "token_to_id"):
        return tokenizer.token_to_id
    # transformers maps an unknown token to None or to the unk id, so ask the vocabulary itself; one
    # get_vocab() call, because it copies the whole vocabulary every time.
    return tokenizer.get_vocab().get


def token_id(tokenizer: object, token: str) -> int:
    """The id of one added token; raises DuetError when the tokenizer lacks it (one not built by duet)."""
    return _require(_lookup(tokenizer), token)


def _require(lookup: Callable[[str], int | None], token: str) -> int:
    found = lookup(token)
    if found is None:
        raise DuetError(f"tokenizer has no service token {token!r}; build it with duet.text (qwen3 or a duet BPE)")
    return int(found)


@dataclass(frozen=True)
class ServiceIds:
    """Ids of the service tokens in one tokenizer. Build with :func:`service_ids`, never by hand."""

    sot: int
    eot: int
    sos: int
    pad: int
    emotions: tuple[int, ...]  # aligned with EMOTIONS
    nonverbals: tuple[int, ...]  # aligned with NONVERBALS
    speakers: tuple[int, ...]  # index i is <|spk_i|>

    def emotion(self, name: str) -> int:
        emotion_token(name)  # validates the name with a clear error
        return self.emotions[EMOTIONS.index(name)]

    def nonverbal(self, name: str) -> int:
        nonverbal_token(name)
        return self.nonverbals[NONVERBALS.index(name)]

    def speaker(self, index: int) -> int:
        speaker_token(index)
        return self.speakers[index]

    @property
    def all(self) -> tuple[int, ...]:
        """Every service id, in SERVICE_TOKENS order."""
        return (self.sot, self.eot, self.sos, self.pad) + self.emotions + self.nonverbals + self.speakers


def service_ids(tokenizer: object) -> ServiceIds:
    """Look every service token up in ``tokenizer`` (a ``tokenizers.Tokenizer`` or a transformers tokenizer)."""
    lookup = _lookup(tokenizer)
    ids = [_require(lookup, t) for t in SERVICE_TOKENS]
    n_ctl, n_emo, n_nv = len(CONTROL_TOKENS), len(EMOTION_TOKENS), len(NONVERBAL_TOKENS)
    return ServiceIds(
        sot=ids[0],
        eot=ids[1],
        sos=ids[2],
        pad=ids[3],
        emotions=tuple(ids[n_ctl : n_ctl + n_emo]),
        nonverbals=tuple(ids[n_ctl + n_emo : n_ctl + n_emo + n_nv]),
        speakers=tuple(ids[n_ctl + n_emo + n_nv :]),
    )
