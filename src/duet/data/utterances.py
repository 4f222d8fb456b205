"""Manifest utterances as training data: which ones a split keeps, and the text a model reads for each.

Shared by every family's data module (``duet.gepard.data``, ``duet.luna.data``), so that training and inference read
text the same way whichever model speaks it:

- ``prepare_text``: the utterance's text through ``duet.text.prompts.prepare_input`` (English normalisation for
  languages ``en*``; others as written), as inference prepares a request's text;
- ``select_utterances``: one split, optionally only some languages and without held-out speakers (voices kept
  unseen for evaluation), optionally a fixed subset spread over speakers (validation: the first ``limit`` in id-hash
  order);
- ``coded_texts``: a split's utterances that have codes and something to say, with their prepared text, and
  :class:`SplitFacts`, the counts and summary every family's split data reports;
- ``train_tokenizer``: duet's byte-level BPE trained on the prepared training texts.

A data config passes as anything with ``languages``, ``normalize`` and ``held_out_speakers`` fields (:class:`TextSelection`), which every
family's frozen data config has.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Protocol, Sequence

from duet.data.manifest import Utterance, read_manifest
from duet.errors import DuetError
from duet.text.prompts import prepare_input


class TextSelection(Protocol):
    languages: tuple[str, ...]  # keep only manifest languages starting with one of these; () = all
    normalize: bool  # English text normalisation (numbers, money, abbreviations -> words)
    held_out_speakers: tuple[str, ...]  # speakers left out (voices kept unseen for evaluation)


def prepare_text(utt: Utterance, cfg: TextSelection) -> str:
    """The text a model reads for ``utt`` (training): :func:`prepare_input` with the data config's choice."""
    return prepare_input(utt.text, utt.language, cfg.normalize)


def hash_order(utts: Sequence[Utterance]) -> list[Utterance]:
    """A fixed order that spreads speakers (ids sorted by their SHA-1): the first N make a stable held-out subset."""
    return sorted(utts, key=lambda u: hashlib.sha1(u.id.encode()).hexdigest())


def select_utterances(manifest: str | Path | Sequence[Utterance], split: str,
                      cfg: TextSelection) -> list[Utterance]:
    utts = read_manifest(manifest) if isinstance(manifest, (str, Path)) else list(manifest)
    keep = [u for u in utts if u.split == split]
    if cfg.languages:
        keep = [u for u in keep if any(u.language == lang or u.language.startswith(lang + "-")
                                       for lang in cfg.languages)]
    if cfg.held_out_speakers:
        keep = [u for u in keep if u.speaker not in cfg.held_out_speakers]
    return keep


def coded_texts(manifest: str | Path | Sequence[Utterance], split: str, cfg: TextSelection, has_codes,
                ordered: bool = False) -> tuple[list[tuple[Utterance, str]], dict[str, int]]:
    """Utterances of ``split`` with codes (``u.id in has_codes``) and non-empty prepared text -> ([(utterance,
    text)], counts left out by reason: ``no_codes``, ``empty_text``, and ``too_long`` at 0 for the caller's length
    checks). ``ordered``: in :func:`hash_order` (a fixed subset's order), else the manifest's."""
    utts = select_utterances(manifest, split, cfg)
    if ordered:
        utts = hash_order(utts)
    dropped = {"no_codes": 0, "too_long": 0, "empty_text": 0}
    chosen: list[tuple[Utterance, str]] = []
    for u in utts:
        if u.id not in has_codes:
            dropped["no_codes"] += 1
            continue
        text = prepare_text(u, cfg)
        if not text:
            dropped["empty_text"] += 1
            continue
        chosen.append((u, text))
    return chosen, dropped


class SplitFacts:
    """Size and summary of one split's training items (each with ``frames``); ``frame_rate`` may be None."""

    items: list
    frame_rate: float | None
    dropped: dict[str, int]

    def __len__(self) -> int:
        return len(self.items)

    @property
    def frames(self) -> int:
        return sum(it.frames for it in self.items)

    def summary(self) -> str:
        hours = f", {self.frames / self.frame_rate / 3600:.2f} h" if self.frame_rate else ""
        dropped = ", ".join(f"{k} {v}" for k, v in self.dropped.items() if v)
        return (f"{len(self.items)} utterances{hours}, {self.frames} frames"
                + (f" (left out: {dropped})" if dropped else ""))


def training_texts(manifest: str | Path, cfg: TextSelection) -> list[str]:
    """Prepared texts of the training split (for training a BPE tokenizer on what the model will read)."""
    return [prepare_text(u, cfg) for u in select_utterances(manifest, "train", cfg)]


def train_tokenizer(manifest: str | Path, out_path: str | Path, cfg: TextSelection, vocab_size: int = 2048,
                    lowercase: bool = False, phonemes: str | None = None) -> Path:
    """Train duet's byte-level BPE (``duet.text.bpe``) on the training texts and save ``tokenizer.json``;
    with ``phonemes`` (an espeak-ng voice) on their IPA, marked as a phoneme tokenizer (``duet.text.phonemes``)."""
    from duet.text.bpe import BPEConfig, save_bpe, train_bpe

    texts = training_texts(manifest, cfg)
    if not texts:
        raise DuetError(f"no training texts in {manifest} to train a tokenizer on")
    if phonemes is None:
        return save_bpe(train_bpe(texts, BPEConfig(vocab_size=vocab_size, lowercase=lowercase)), out_path)
    from duet.text.phonemes import mark, phonemize_many

    tok = train_bpe(phonemize_many(texts, phonemes), BPEConfig(vocab_size=vocab_size))
    return save_bpe(mark(tok, phonemes), out_path)
