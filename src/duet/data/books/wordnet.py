"""The quoted usage examples of WordNet 3.0, made into sentences.

Source and licence (from /usr/share/doc/wordnet-base/copyright): `wordnet-base`, the WordNet 3.0 database,
Copyright 2006 by Princeton University, under the WordNet 3.0 licence: use, copying, modification and
distribution for any purpose without fee, provided the copyright notice and the disclaimer appear on all copies.

Format of `data.noun`, `data.verb`, `data.adj`, `data.adv`: the licence header is a block of lines that start
with two spaces; every other line is one synset, `offset lex_filenum ss_type w_cnt word lex_id ... | gloss`.
The gloss holds definitions and usage examples separated by "; ", each example in double quotes, sometimes
followed by an attribution (`"the harder the conflict the more glorious the triumph"--Thomas Paine`). Only the
quoted examples are kept (a definition is not a sentence); an example mostly starts in lower case and has no
final stop, so it gets a capital and a full stop.
"""

from __future__ import annotations

import re
from pathlib import Path

from duet.errors import MissingDependency

WORDNET_DIR = Path("/usr/share/wordnet")
PARTS_OF_SPEECH = ("noun", "verb", "adj", "adv")

_EXAMPLE = re.compile(r'"([^"]+)"')


def gloss_examples(line: str) -> list[str]:
    """The quoted examples in the gloss of one data line (none for a header line or a gloss without quotes)."""
    if line.startswith("  ") or " | " not in line:
        return []
    return [e.strip() for e in _EXAMPLE.findall(line.split(" | ", 1)[1]) if e.strip()]


def as_sentence(example: str) -> str:
    """A capital first and a full stop last, unless the example already ends in . ! or ?."""
    example = example[:1].upper() + example[1:]
    return example if example.endswith((".", "!", "?")) else example + "."


def examples(wordnet_dir: Path = WORDNET_DIR) -> list[str]:
    """Every usage example of the four data files, as a sentence, in file order."""
    paths = [wordnet_dir / f"data.{pos}" for pos in PARTS_OF_SPEECH]
    if not all(p.is_file() for p in paths):
        raise MissingDependency(f"WordNet database ({wordnet_dir})", "apt-get install wordnet-base")
    out: list[str] = []
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            out.extend(as_sentence(e) for line in f for e in gloss_examples(line))
    return out
