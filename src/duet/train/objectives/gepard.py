"""Gepard pretraining: the model's own loss, the report's split learning rates, effective-rank diagnostics.

- loss: ``GepardModel.forward`` (Gepard §2.5: sum of the 32 channel CEs + 2 x BCE(stop, pos_weight 25), the
  phantom stop frame, the all-ignored-labels guard); logged as ``loss``, ``ce`` and ``stop_bce``.
- LR multipliers (§3.1 item 4, "Split Learning Rates", after Kumar et al. 2022): text embedding x0.2 "to prevent
  catastrophic forgetting and preserve the structure of the pretrained text space", audio interface x0.5; the
  backbone layers and the heads train at the base LR. Parameter names are those of ``duet.gepard.model``.
- voice compressor (optional, ``GepardConfig.voice``; Gepard §2.6): its L_div and L_supcon join the model's loss
  and are logged as ``div`` and ``supcon``; the compressor and ``null_prefix`` (``qformer.*``) train at 0.1x the
  base LR (§2.6.1, ``QFormer.lr_multipliers``).
- guided attention (optional, off by default; ``duet.gepard.alignment``): a diagonal prior on a few heads,
  added to the loss and logged as ``guided`` (a divergence from the report, for tiny models).
- diagnostics (§3.1, Figures 2-3): effective rank of the text embedding (the report: ~955 of 1024, no collapse)
  and of each of the 32 audio tables E_k (~96-97 % of their ceiling L_k), plotted to ``ranks.png``. A table is
  L_k x m, so its ceiling is min(L_k, m): L_k in the presets (m >= 8), 2 in the tests' micro model (m = 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from duet.gepard.alignment import GuidedAttentionConfig
from duet.gepard.probes import embedding_ranks
from duet.gepard.qformer import QFormerConfig, compressor_lr_multipliers
from duet.train.loop import Objective
from duet.train.metrics import read_metrics

TEXT_EMBEDDING = "model.embed_tokens."
AUDIO_INTERFACE = "audio_interface."
VOICE_COMPRESSOR = "qformer."  # GepardModel.qformer
TEXT_LR_MULT = 0.2  # Gepard §3.1 item 4
AUDIO_LR_MULT = 0.5


class GepardPretrain(Objective):
    name = "gepard-pretrain"

    def __init__(self, text_lr_mult: float = TEXT_LR_MULT, audio_lr_mult: float = AUDIO_LR_MULT,
                 guided: GuidedAttentionConfig | None = None, voice: QFormerConfig | None = None):
        """``voice``: the model's ``GepardConfig.voice`` (its compressor's LR multiplier), None without one."""
        self.text_lr_mult = text_lr_mult
        self.audio_lr_mult = audio_lr_mult
        self.guided = guided if guided is not None and guided.enabled else None
        self.voice = voice

    def loss(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        # a GepardBatch -> the loss dict of duet.gepard.model.gepard_loss (+ "duration" with aligned text input)
        out = model(batch) if self.guided is None else model(batch, guided=self.guided)
        logged = {k: out[k].detach() for k in ("ce", "stop_bce", "guided", "duration", "div", "supcon") if k in out}
        return out["loss"], logged

    def evaluate(self, model: nn.Module, batch: Any) -> dict[str, float]:
        """Held-out metrics; ``loss`` is Gepard's own loss without the guided term, comparable across runs."""
        out = super().evaluate(model, batch)
        if self.guided is not None:
            out["loss"] -= self.guided.weight * out["guided"]
        return out

    def lr_multipliers(self) -> dict[str, float]:
        multipliers = {TEXT_EMBEDDING: self.text_lr_mult, AUDIO_INTERFACE: self.audio_lr_mult}
        if self.voice is not None:
            multipliers.update(compressor_lr_multipliers(self.voice, VOICE_COMPRESSOR))
        return multipliers

    def diagnostics(self, model: nn.Module) -> dict[str, Any]:
        ranks = embedding_ranks(model)
        m = model.config.audio_embed_dim
        # A table E_k is L_k x m: its rank is bounded by min(L_k, m) (= L_k in the presets, where m >= 8).
        ceilings = [min(level, m) for level in ranks["audio_table_ceiling"]]
        fractions = [r / c for r, c in zip(ranks["audio_tables"], ceilings)]
        return {
            "rank_text": ranks["text_embedding"],
            "rank_text_frac": ranks["text_embedding"] / min(model.embed_tokens.weight.shape),
            "rank_audio_mean_frac": sum(fractions) / len(fractions),  # averaged over the 32 tables
            "rank_audio_min_frac": min(fractions),
            "rank_audio_frac": [round(f, 5) for f in fractions],  # per table, for ranks.png
        }

    def plot(self, metrics_path: Path, run_dir: Path) -> None:
        plot_ranks(metrics_path, run_dir / "ranks.png")


def plot_ranks(metrics_path: str | Path, out_png: str | Path) -> Path | None:
    """Effective rank over training: text embedding (left), each audio table's as a fraction of its ceiling (right)
    -- the report's Figures 2 (right) and 3. None when no diagnostics were logged yet."""
    records = [r for r in read_metrics(metrics_path) if isinstance(r.get("rank_audio_frac"), list)]
    if not records:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in records]
    fractions = torch.tensor([r["rank_audio_frac"] for r in records], dtype=torch.float64)  # (steps, C)
    fig, (ax_t, ax_a) = plt.subplots(1, 2, figsize=(11, 3.6))
    ax_t.plot(steps, [r["rank_text"] for r in records], marker=".")
    ax_t.set_title("text embedding: effective rank", fontsize=9)
    ax_a.plot(steps, fractions.numpy(), color="0.75", linewidth=0.6)
    ax_a.plot(steps, fractions.mean(dim=1).numpy(), color="C0", label="mean of 32 tables")
    ax_a.axhline(1.0, color="k", linestyle="--", linewidth=0.8, label="ceiling min(L_k, m)")
    ax_a.set_ylim(0, 1.05)
    ax_a.set_title("32 audio tables: effective rank / ceiling", fontsize=9)
    ax_a.legend(fontsize=8, loc="lower right")
    for ax in (ax_t, ax_a):
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    out_png = Path(out_png)
    tmp = out_png.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    tmp.replace(out_png)
    return out_png
