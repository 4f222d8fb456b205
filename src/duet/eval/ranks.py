"""Effective-rank report of the embedding tables in a checkpoint (Gepard §3.1 diagnostics, for any model).

Reads a state dict from a ``.safetensors`` file or a checkpoint directory holding ``model.safetensors`` (never a
pickle), picks the 2-D floating tensors whose names match a pattern (by default embeddings, audio tables and
codebooks), and reports each one's effective rank (Roy & Vetterli 2007, :func:`duet.gepard.probes.effective_rank`)
next to its ceiling min(rows, columns). A table far below its ceiling uses few directions of its space: collapsed
codes, or a text embedding that lost its spread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from duet.errors import DuetError

DEFAULT_PATTERN = r"embed|table|codebook"


@dataclass(frozen=True)
class TableRank:
    name: str
    shape: tuple[int, int]
    effective_rank: float

    @property
    def ceiling(self) -> int:
        return min(self.shape)


def load_state_dict(path: str | Path) -> dict:
    from safetensors.torch import load_file

    path = Path(path)
    if path.is_dir():
        path = path / "model.safetensors"
    if path.suffix != ".safetensors" or not path.is_file():
        raise DuetError(f"{path}: expected a .safetensors file or a directory holding model.safetensors")
    try:
        return load_file(str(path))
    except Exception as err:  # safetensors raises its own error types for corrupt files
        raise DuetError(f"cannot read {path}: {err}") from err


def embedding_ranks(state_dict: dict, pattern: str = DEFAULT_PATTERN) -> list[TableRank]:
    """Effective rank of every 2-D floating tensor whose name matches ``pattern`` (case-insensitive)."""
    from duet.gepard.probes import effective_rank

    try:
        regex = re.compile(pattern, re.IGNORECASE)
    except re.error as err:
        raise DuetError(f"bad --pattern {pattern!r}: {err}") from err
    out = []
    for name in sorted(state_dict):
        t = state_dict[name]
        if t.ndim == 2 and t.is_floating_point() and regex.search(name):
            out.append(TableRank(name, (int(t.shape[0]), int(t.shape[1])), effective_rank(t)))
    return out


def format_ranks(ranks: list[TableRank]) -> str:
    from duet.eval.report import markdown_table

    return markdown_table(["tensor", "shape", "effective rank", "ceiling", "ratio"],
                          [[r.name, f"{r.shape[0]} x {r.shape[1]}", f"{r.effective_rank:.1f}", str(r.ceiling),
                            f"{r.effective_rank / r.ceiling:.3f}"] for r in ranks])
