"""Loss curves from a metrics JSONL file, as a PNG (matplotlib's Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from duet.train.metrics import read_metrics


def smooth(values: Sequence[float], alpha: float = 0.05) -> list[float]:
    """Bias-corrected exponential moving average (as TensorBoard's smoothing slider)."""
    out, avg = [], 0.0
    for i, v in enumerate(values):
        avg = (1 - alpha) * avg + alpha * v
        out.append(avg / (1 - (1 - alpha) ** (i + 1)))
    return out


def plot_metrics(records: list[dict[str, Any]] | str | Path, out_png: str | Path,
                 keys: Sequence[str] | None = None, title: str = "") -> Path:
    """One panel per metric (raw points faint, smoothed line solid), steps on x; returns the PNG path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not isinstance(records, list):
        records = read_metrics(records)
    if keys is None:
        seen: dict[str, None] = {}
        for r in records:
            for k, v in r.items():
                if k not in ("step", "time") and isinstance(v, (int, float)):
                    seen.setdefault(k)
        keys = list(seen)
    keys = [k for k in keys if any(isinstance(r.get(k), (int, float)) for r in records)]
    cols = min(3, max(1, len(keys)))
    rows = max(1, -(-len(keys) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.2 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        pts = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
        steps, vals = [p[0] for p in pts], [p[1] for p in pts]
        ax.plot(steps, vals, alpha=0.25, linewidth=0.8)
        if len(vals) > 1:
            ax.plot(steps, smooth(vals, alpha=min(1.0, 20 / len(vals))), linewidth=1.5)
        if vals and min(vals) > 0 and max(vals) / max(min(vals), 1e-12) > 20:
            ax.set_yscale("log")
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_png.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    tmp.replace(out_png)
    return out_png
