"""Phoneme input for tiny models: text -> espeak-ng's IPA, then duet's small BPE over the IPA.

A divergence from both reports (they read Qwen3 BPE tokens): a model of a few million parameters trained on a
few hours of speech has to learn English spelling-to-sound from that data as well as speech, and DESIGN.md §D
saw such a model lose the text after a few words. Reading phonemes removes the spelling half of the job. The
front end is a configuration choice of the tokenizer; the model and its audio side are unchanged.

How the choice travels: a phoneme tokenizer is an ordinary duet BPE ``tokenizer.json`` (trained on IPA strings)
whose normaliser carries a marker, ``Replace(MARK + voice, "")``: a pattern that never occurs in text, so the
normaliser does nothing, and the one file says which espeak-ng voice makes its input. :func:`duet.text.get_tokenizer`
sees the marker and returns a :class:`PhonemeTokenizer`, whose ``encode`` phonemises first; every caller that
encodes text (training data, ``duet speak``, the serving adapters) is unchanged.

What is phonemised: the text between service tokens (``[laughter]``, ``<|emo_happy|>`` pass through whole; ``[laugh]``
and other spellings of an event become its token first, ``duet.text.tags``), in
pieces cut at punctuation, which espeak-ng would drop; the punctuation is kept between the pieces' IPA so that
pauses stay visible to the model. Needs the ``espeak-ng`` program (install.sh installs it).
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from collections.abc import Sequence

from duet.errors import DuetError
from duet.text.tags import canonical_tags
from duet.text.tokens import SERVICE_TOKEN_RE

MARK = "\u2063duet-phonemes:"  # U+2063 INVISIBLE SEPARATOR: no text a user types contains it
DEFAULT_VOICE = "en-us"

_PUNCT_RE = re.compile(r"([.,;:!?\u2026]+)")


@functools.cache
def _voices(exe: str) -> frozenset[str]:
    """The voice names espeak-ng knows: its languages (en-us) and voice files (gmw/en and en)."""
    out = subprocess.run([exe, "--voices"], capture_output=True, text=True, check=False).stdout
    names = set()
    for line in out.splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 5:
            names.update((cols[1], cols[4], cols[4].rsplit("/", 1)[-1]))
    return frozenset(names)


def _espeak(pieces: Sequence[str], voice: str) -> list[str]:
    """IPA of each piece (no punctuation inside), in one espeak-ng run; pieces are paragraphs, so its output
    has one blank-line-separated block per piece (a piece espeak splits itself comes back on several lines)."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise DuetError("phoneme input needs the espeak-ng program: apt-get install espeak-ng (install.sh does)")
    if voice not in _voices(exe):  # espeak-ng itself falls back to another voice without a word
        raise DuetError(f"espeak-ng has no voice {voice!r} (see espeak-ng --voices)")
    proc = subprocess.run([exe, "-q", "--ipa", "-v", voice], input="\n\n".join(pieces) + "\n",
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise DuetError(f"espeak-ng failed for voice {voice!r}: {proc.stderr.strip()[:200]}")
    blocks = [" ".join(b.split()) for b in re.split(r"\n[ \t]*\n", proc.stdout.strip("\n"))]
    if len(blocks) != len(pieces):
        if len(pieces) == 1:
            return [" ".join(proc.stdout.split())]
        return [_espeak([p], voice)[0] for p in pieces]  # espeak merged or split paragraphs: one run per piece
    return blocks


def _split(text: str) -> list[tuple[bool, str]]:
    """``text`` -> [(to_phonemise, piece)]: service tokens and punctuation runs are kept as they are."""
    out: list[tuple[bool, str]] = []
    for part in SERVICE_TOKEN_RE.split(canonical_tags(text)):
        if not part:
            continue
        if SERVICE_TOKEN_RE.fullmatch(part):
            out.append((False, part))
            continue
        for piece in _PUNCT_RE.split(part):
            if _PUNCT_RE.fullmatch(piece):
                out.append((False, piece))
            elif piece.strip():
                out.append((True, piece.strip()))
    return out


def _join(parts: list[str]) -> str:
    text = ""
    for part in parts:
        glue = "" if not text or _PUNCT_RE.fullmatch(part) else " "
        text += glue + part
    return text


_CACHE: dict[tuple[str, str], str] = {}  # (voice, text) -> IPA
_CACHE_SIZE = 65536  # entries; the cache starts over when a batch would take it past this


def phonemize_many(texts: Sequence[str], voice: str = DEFAULT_VOICE) -> list[str]:
    """IPA of each text (punctuation and service tokens kept), with one espeak-ng run for the texts not seen
    before: training re-encodes its texts (Luna's duration weights, augmented repeats every epoch)."""
    found = {t: _CACHE[(voice, t)] for t in texts if (voice, t) in _CACHE}
    missing = [t for t in dict.fromkeys(texts) if t not in found]
    if missing:
        splits = [_split(t) for t in missing]
        todo = [piece for parts in splits for keep, piece in parts if keep]
        ipa = iter(_espeak(todo, voice) if todo else [])
        fresh = {t: _join([next(ipa) if keep else piece for keep, piece in parts]) for t, parts in zip(missing, splits)}
        if len(_CACHE) + len(fresh) > _CACHE_SIZE:
            _CACHE.clear()
        _CACHE.update(((voice, t), text_ipa) for t, text_ipa in fresh.items())
        found.update(fresh)
    return [found[t] for t in texts]


def phonemize(text: str, voice: str = DEFAULT_VOICE) -> str:
    """IPA of one text (cached like :func:`phonemize_many`)."""
    return phonemize_many([text], voice)[0]


def phoneme_voice(tokenizer) -> str | None:
    """The espeak-ng voice of a phoneme tokenizer (a ``PhonemeTokenizer`` or a phoneme ``PlainBPE``), else None;
    never imports transformers."""
    return getattr(tokenizer, "voice", None)


def surface(tokenizer, text: str) -> str:
    """The string a tokenizer's ids (and offsets) index for ``text``: its IPA for a phoneme tokenizer, else itself."""
    voice = phoneme_voice(tokenizer)
    return text if voice is None else phonemize(text, voice)


def mark(tokenizer, voice: str = DEFAULT_VOICE):
    """Make a ``tokenizers.Tokenizer`` trained on IPA a phoneme tokenizer (its normaliser carries the marker)."""
    from tokenizers import normalizers

    marker = normalizers.Replace(MARK + voice, "")
    current = tokenizer.normalizer
    tokenizer.normalizer = normalizers.Sequence([current, marker] if current is not None else [marker])
    return tokenizer


def marked_voice(tokenizer_json: dict) -> str | None:
    """The espeak-ng voice a ``tokenizer.json`` (as parsed JSON) is marked with, else None."""
    stack = [tokenizer_json.get("normalizer")]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            pattern = node.get("pattern", {})
            content = pattern.get("String") if isinstance(pattern, dict) else None
            if node.get("type") == "Replace" and isinstance(content, str) and content.startswith(MARK):
                return content[len(MARK):]
            stack.extend(node.get("normalizers") or [])
    return None


@functools.cache
def phoneme_tokenizer_class():
    """:class:`PhonemeTokenizer`, defined on first use so that importing this module does not import transformers."""
    from transformers import PreTrainedTokenizerFast

    class PhonemeTokenizer(PreTrainedTokenizerFast):
        """A duet BPE over IPA whose ``encode`` phonemises its text first (``voice`` is set by the loader)."""

        voice: str = DEFAULT_VOICE

        def encode(self, text, *args, **kwargs):  # noqa: D102 - same contract as the parent's
            if not isinstance(text, str):
                raise DuetError("a phoneme tokenizer encodes text (a str)")
            return super().encode(phonemize(text, self.voice), *args, **kwargs)

        def __call__(self, text, *args, **kwargs):
            texts = [text] if isinstance(text, str) else list(text)
            ipa = phonemize_many(texts, self.voice)
            return super().__call__(ipa[0] if isinstance(text, str) else ipa, *args, **kwargs)

    return PhonemeTokenizer
