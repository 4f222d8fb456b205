"""The check report: every clip of DATA that cannot be used, with its reason, in one tab-separated file.

    clip<TAB>reason<TAB>detail<TAB>where
    vm-intro<TAB>clipped<TAB>0.31% of the samples at full scale<TAB>wavs/vm-intro.wav

Reasons are ``duet.voice.checks.REASONS``; ``where`` is where DATA lists the clip (a file, or a line of
metadata.csv / manifest.jsonl). The file is written whole, atomically, whether training goes on or not.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from duet.voice.checks import REASONS

HEADER = ("clip", "reason", "detail", "where")


@dataclass(frozen=True)
class Rejection:
    clip: str
    reason: str  # one of REASONS
    detail: str
    where: str


def _cell(text: str) -> str:
    return " ".join(str(text).split())  # no tab or newline inside a cell


def write_report(path: Path, rejections: Sequence[Rejection]) -> Path:
    """Write the report (sorted by reason, then clip); returns its path."""
    order = {r: i for i, r in enumerate(REASONS)}
    rows = sorted(rejections, key=lambda r: (order.get(r.reason, len(order)), r.clip))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    lines = ["\t".join(HEADER)] + ["\t".join(_cell(x) for x in (r.clip, r.reason, r.detail, r.where)) for r in rows]
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_report(path: Path) -> list[Rejection]:
    lines = Path(path).read_text(encoding="utf-8").splitlines()[1:]
    return [Rejection(*line.split("\t")) for line in lines if line.strip()]


def reason_counts(rejections: Sequence[Rejection]) -> dict[str, int]:
    """Reason -> clips, in the order of ``REASONS``."""
    counts = Counter(r.reason for r in rejections)
    return {r: counts[r] for r in REASONS if counts[r]}
