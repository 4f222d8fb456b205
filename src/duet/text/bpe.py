"""A small byte-level BPE for tiny models, trained on the corpus text and saved as one ``tokenizer.json``.

Qwen3's 151,643-token vocabulary would make the embedding most of a 5M-parameter model; a few hundred to a few
thousand merges trained on the corpus do the job. The design copies Qwen's (``qwen.py``) so both behave alike:
NFC normalisation, Qwen2's pre-tokenizer split, byte-level alphabet (every byte is a token, so any text encodes and
decodes exactly, with no unknown token), and duet's service tokens appended after the BPE vocabulary:

  0 .. n - 1         the 256 bytes, then merges in training order (n <= vocab_size; a small corpus may run out
                     of pairs seen min_frequency times before reaching vocab_size)
  n .. n + 149       tokens.SERVICE_TOKENS, in their fixed order

so a model's embedding has ``len(tokenizer)`` = n + len(SERVICE_TOKENS) rows.
Training is deterministic: the same texts and config give a byte-identical file, in any process.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from duet.errors import DuetError
from duet.text.qwen import QWEN2_SPLIT_REGEX
from duet.text.tokens import PAD, SERVICE_TOKEN_RE, SERVICE_TOKENS, service_ids

_NUM_BYTES = 256


@dataclass(frozen=True)
class BPEConfig:
    vocab_size: int = 1024  # at most this many bytes + merges; service tokens come on top
    min_frequency: int = 2  # a pair seen once is noise in a small corpus
    lowercase: bool = False  # tiny models may fold case; the text normaliser keeps case either way


def _without_service_tokens(texts: Iterable[str]) -> Iterator[str]:
    for text in texts:
        yield from (piece for piece in SERVICE_TOKEN_RE.split(text) if piece and not SERVICE_TOKEN_RE.fullmatch(piece))


def train_bpe(texts: Iterable[str], config: BPEConfig = BPEConfig()):
    """Train on ``texts`` and return a ``tokenizers.Tokenizer``; the same texts and config give the same file."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    if config.vocab_size <= _NUM_BYTES:
        raise DuetError(f"BPE vocab_size must exceed the {_NUM_BYTES} byte tokens, got {config.vocab_size}")
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    norms = [normalizers.NFC()] + ([normalizers.Lowercase()] if config.lowercase else [])
    tok.normalizer = normalizers.Sequence(norms)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size,
        min_frequency=config.min_frequency,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Cut service tokens out before counting pairs, so "[laughter]" in a transcript does not become merges
    # (tokenizers' trainer counts pairs inside tokens added beforehand, so adding them first does not help).
    tok.train_from_iterator(_without_service_tokens(texts), trainer=trainer)
    tok.add_special_tokens(list(SERVICE_TOKENS))  # after training, so they follow the BPE vocabulary
    ids = service_ids(tok).all
    if ids != tuple(range(tok.get_vocab_size(with_added_tokens=False), tok.get_vocab_size())):
        raise DuetError("service tokens did not land right after the BPE vocabulary")  # a tokenizers change
    return tok


def save_bpe(tokenizer, path: str | os.PathLike) -> Path:
    """Write the single ``tokenizer.json`` (creating parent folders)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))
    return path


class PlainBPE:
    """A duet BPE ``tokenizer.json`` through the ``tokenizers`` package alone, for inference without importing
    transformers (about a second of a one-sentence ``duet speak``): the part of ``PreTrainedTokenizerFast`` that
    duet's inference calls (``encode``, ``len``, vocabulary lookups, ``backend_tokenizer`` for character offsets).
    A phoneme BPE (``voice`` set) phonemises its text first, as ``PhonemeTokenizer`` does; the ids are theirs."""

    def __init__(self, path: str | os.PathLike, voice: str | None = None):
        from tokenizers import Tokenizer

        self.backend_tokenizer = Tokenizer.from_file(str(path))
        if voice is not None:
            self.voice = voice  # the espeak-ng voice of a phoneme BPE (duet.text.phonemes.phoneme_voice)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if not isinstance(text, str):
            raise DuetError("a tokenizer encodes text (a str)")
        voice = getattr(self, "voice", None)
        if voice is not None:
            from duet.text.phonemes import phonemize

            text = phonemize(text, voice)
        return self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        return self.backend_tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def __len__(self) -> int:
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)

    def get_vocab(self) -> dict[str, int]:
        return self.backend_tokenizer.get_vocab(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self.backend_tokenizer.token_to_id(token)


def load_bpe(path: str | os.PathLike, plain: bool = False):
    """A saved duet BPE as a ``PreTrainedTokenizerFast`` (the same interface as ``load_qwen3_tokenizer``); a phoneme
    BPE (``duet.text.phonemes``) as its ``PhonemeTokenizer`` subclass. ``plain``: a :class:`PlainBPE` (inference
    alone, without transformers)."""
    import json

    from duet.text.phonemes import marked_voice, phoneme_tokenizer_class

    path = Path(path)
    if not path.is_file():
        raise DuetError(f"no tokenizer file at {path}")
    voice = marked_voice(json.loads(path.read_text(encoding="utf-8")))
    if plain:
        plain_tok = PlainBPE(path, voice)
        service_ids(plain_tok)  # raises a clear DuetError for a tokenizer.json that duet did not train
        return plain_tok
    from transformers import PreTrainedTokenizerFast

    cls = PreTrainedTokenizerFast if voice is None else phoneme_tokenizer_class()
    tok = cls(tokenizer_file=str(path), pad_token=PAD, clean_up_tokenization_spaces=False)
    if voice is not None:
        tok.voice = voice  # a phoneme tokenizer (duet.text.phonemes): encode() runs espeak-ng with this voice
    service_ids(tok)  # raises a clear DuetError for a tokenizer.json that duet did not train
    return tok
