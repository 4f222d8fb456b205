"""Text side of duet: tokenizers, service tokens, normalisation and the short-register augmentation.

``tokens``     every service token (SOT/EOT/SOS, emotions, non-verbal events, speakers) and id lookup
``qwen``       Qwen3's tokenizer rebuilt offline (ids equal Qwen3's) + service tokens
``bpe``        a small byte-level BPE trained on the corpus for tiny models + service tokens
``phonemes``   phoneme input for tiny models: espeak-ng IPA through a BPE trained on it (a marked ``bpe`` file)
``normalize``  English numbers, money, dates, abbreviations -> words
``augment``    Gepard's short-register text repetition

transformers and tokenizers are imported only when a tokenizer is built, so importing this package is cheap.
"""

from __future__ import annotations

import os
from pathlib import Path

from duet.errors import DuetError

QWEN3 = "qwen3"


def get_tokenizer(name: str | os.PathLike, plain: bool = False):
    """A tokenizer by name: ``"qwen3"``, or the path of a duet BPE ``tokenizer.json`` (or a folder holding one);
    a phoneme BPE comes back as a ``PhonemeTokenizer`` whose ``encode`` phonemises first.

    Both come back as a transformers ``PreTrainedTokenizerFast`` with duet's service tokens; look their ids up with
    ``duet.text.tokens.service_ids(tokenizer)``. ``plain``: a duet BPE as a ``duet.text.bpe.PlainBPE`` (encoding for
    inference, without importing transformers).
    """
    if str(name) == QWEN3:
        from duet.text.qwen import load_qwen3_tokenizer

        return load_qwen3_tokenizer()
    path = Path(name)
    if path.is_dir():
        path = path / "tokenizer.json"
    if path.is_file():
        from duet.text.bpe import load_bpe

        return load_bpe(path, plain=plain)
    raise DuetError(f"unknown tokenizer {str(name)!r}: use {QWEN3!r} or the path of a duet BPE tokenizer.json")
