"""Diagnostics: per-frame entropy and stop-probability probes (Gepard §3.3, §5) and effective rank (§3.1).

Probes. The short register (1-2 word inputs) makes AR TTS run away or stop late; the report diagnoses it with the
entropy of the 32 channel distributions and the stop probability at every generated frame. The sampler
(``duet.gepard.generate``) records both at every stop decision: entry t is the distribution over frame t and the
stop probability read after t frames, so a generation of T frames that stopped has T + 1 entries (the last one is
the decision that ended it). Entropies are of the model's distributions after CFG and before temperature / top-k
(a property of the model, not of the sampler settings), in nats. Entries after a row ended are NaN.

Effective rank (Roy & Vetterli 2007), §3.1: eff_rank(W) = exp(-sum_i p_i log p_i), p_i = sigma_i / sum_j sigma_j.
The report tracks it for the text embedding (~955 of 1024) and for each audio table E_k (near its ceiling L_k).

Shape legend: B batch, N stop decisions (frames + 1), C channels (32), Lmax = max L_k.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class FrameProbes:
    entropy: torch.Tensor  # (B, N, C) nats
    stop_prob: torch.Tensor  # (B, N)

    def mean_entropy(self) -> torch.Tensor:
        """(B, N): entropy averaged over the 32 channels."""
        return self.entropy.mean(dim=-1)

    def row(self, b: int = 0) -> dict[str, list]:
        """JSON-able probes of one row, NaN entries (after the row ended) dropped."""
        keep = ~torch.isnan(self.stop_prob[b])
        return {
            "stop_prob": self.stop_prob[b][keep].tolist(),
            "mean_entropy": self.mean_entropy()[b][keep].tolist(),
            "entropy": self.entropy[b][keep].tolist(),  # [frame][channel]
        }


def channel_entropy(logits: torch.Tensor) -> torch.Tensor:
    """logits (..., C, Lmax) with -inf for absent levels -> entropy (..., C) in nats (0 log 0 = 0)."""
    probs = torch.softmax(logits.float(), dim=-1)
    return torch.special.entr(probs).sum(dim=-1)


def effective_rank(matrix: torch.Tensor) -> float:
    """exp(entropy of the normalised singular values); 0.0 for an all-zero matrix."""
    sigma = torch.linalg.svdvals(matrix.detach().double())
    total = sigma.sum()
    if total <= 0:
        return 0.0
    p = sigma / total
    return math.exp(float(torch.special.entr(p).sum()))


def embedding_ranks(model) -> dict[str, object]:
    """Effective rank of a GepardModel's text embedding and of each of its 32 audio tables (§3.1 diagnostics)."""
    interface = model.audio_interface
    return {
        "text_embedding": effective_rank(model.embed_tokens.weight),
        "audio_tables": [effective_rank(interface.table(k)) for k in range(len(interface.levels))],
        "audio_table_ceiling": list(interface.levels),
    }


def save_probes(probes: FrameProbes, path: str | Path, *, row: int = 0, frame_rate: float | None = None,
                title: str = "") -> tuple[Path, Path]:
    """Write one row's probes to ``path.json`` and a two-panel plot to ``path.png`` (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = probes.row(row)
    json_path, png_path = path.with_suffix(".json"), path.with_suffix(".png")
    json_path.write_text(json.dumps({"title": title, "frame_rate": frame_rate, **data}))

    n = len(data["stop_prob"])
    x = [i / frame_rate for i in range(n)] if frame_rate else list(range(n))
    fig, (ax_h, ax_p) = plt.subplots(2, 1, sharex=True, figsize=(8, 5))
    entropy = torch.tensor(data["entropy"]).reshape(n, -1)
    ax_h.plot(x, entropy.numpy(), color="0.8", linewidth=0.5)
    ax_h.plot(x, data["mean_entropy"], color="C0", label="mean over channels")
    ax_h.set_ylabel("entropy (nats)")
    ax_h.legend(loc="upper right")
    ax_p.plot(x, data["stop_prob"], color="C3")
    ax_p.set_yscale("log")
    ax_p.set_ylabel("p(stop)")
    ax_p.set_xlabel("seconds" if frame_rate else "frame")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return json_path, png_path
