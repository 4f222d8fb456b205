"""Guided attention: a prior on how audio positions attend to the text (an optional training aid).

A divergence from the Gepard report, for tiny models: DESIGN.md §D saw a 5M-parameter Gepard follow the first few
words and then drift into fluent nonsense, the classic failure of attention that never learned a monotonic
text-to-speech alignment. Tachibana et al. (2017, "guided attention") add a penalty on attention mass far from the
diagonal; duet applies it to a few heads of a few layers of the stock backbone, leaving the architecture and
inference untouched (training runs those layers' attention in eager mode to read the weights).

For row b with S_b text positions (SOT .. SOS) and T_b frames, the query predicting frame j sits at position
S_b - 1 + j (SOS predicts frame 0). Its attention over the text positions, renormalised to sum to 1, is penalised
with W[j, s] = 1 - exp(-(j / T_b - s / S_b)^2 / (2 sigma^2)); the loss is the mean of sum_s A[j, s] W[j, s] over
every guided query (row, layer, head, frame). Rows whose text is empty (the CFG text drop, 3 service tokens) are
left out. Validation reports Gepard's own loss without this term.

Attention supervision (``target="aligned"``) replaces the diagonal guess by the corpus timing: with the batch's
durations (frames per wrapped token, as aligned text input reads them), frame j belongs to wrapped token k_j
(``duet.nn.aligned.frame_tokens``, EOT two from the end), and W[j, s] = 1 - exp(-(s - k_j)^2 / (2 sigma_tok^2)):
the guided heads learn to look at the token being spoken (and its neighbours, sigma_tok tokens wide). Training
only: the architecture and inference stay stock, so vLLM and the 500M preset are untouched.

Shape legend: B batch, H heads, L positions, S text positions, T frames.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from duet.errors import DuetError
from duet.gepard.aligned import EOT_BACK
from duet.nn.aligned import frame_tokens

TARGETS = ("diagonal", "aligned")


@dataclass(frozen=True)
class GuidedAttentionConfig:
    weight: float = 0.0  # 0 = off; the loss added to Gepard's is weight x the penalty (which lies in [0, 1])
    sigma: float = 0.2  # width of the diagonal band, as a fraction of the utterance
    layers: tuple[int, ...] = (1, 2)  # backbone layers whose attention is guided
    heads: int = 2  # the first this many heads of each guided layer
    target: str = "diagonal"  # "diagonal" (no timing needed) or "aligned" (the corpus timing: attention supervision)
    token_sigma: float = 1.0  # width of the aligned target, in text tokens

    def __post_init__(self) -> None:
        if self.weight < 0 or self.sigma <= 0 or self.heads < 1 or not self.layers:
            raise DuetError("guided attention needs weight >= 0, sigma > 0, heads >= 1 and at least one layer")
        if self.target not in TARGETS:
            raise DuetError(f"guided attention target must be one of {', '.join(TARGETS)}, not {self.target!r}")
        if self.token_sigma <= 0:
            raise DuetError("guided attention needs token_sigma > 0")

    @property
    def enabled(self) -> bool:
        return self.weight > 0


def diagonal_penalty(frames: torch.Tensor, text: torch.Tensor, t_max: int, s_max: int,
                     sigma: float) -> torch.Tensor:
    """W (B, T, S) for rows of ``frames`` (B,) frames and ``text`` (B,) text positions; 0 outside each row."""
    j = torch.arange(t_max, device=frames.device, dtype=torch.float32)[None, :, None] / frames[:, None, None]
    s = torch.arange(s_max, device=frames.device, dtype=torch.float32)[None, None, :] / text[:, None, None]
    w = 1 - torch.exp(-((j - s) ** 2) / (2 * sigma**2))  # (B, T, S)
    inside = (j < 1) & (s < 1)
    return torch.where(inside, w, torch.zeros_like(w))


def aligned_penalty(durations: torch.Tensor, text_lengths: torch.Tensor, t_max: int, s_max: int,
                    sigma: float) -> torch.Tensor:
    """W (B, T, S) from ``durations`` (B, S') frames per wrapped token: 0 at each frame's own token, rising towards
    1 away from it (one minus a Gaussian of width ``sigma`` tokens); 0 past each row's text."""
    b = durations.shape[0]
    frames = torch.arange(t_max, device=durations.device).expand(b, -1)  # (B, T)
    k, _, _ = frame_tokens(durations[:, :s_max], text_lengths, frames, EOT_BACK)  # (B, T)
    s = torch.arange(s_max, device=durations.device, dtype=torch.float32)[None, None, :]
    w = 1 - torch.exp(-((s - k[..., None].float()) ** 2) / (2 * sigma**2))  # (B, T, S)
    inside = s < text_lengths[:, None, None]
    return torch.where(inside, w, torch.zeros_like(w))


def guided_attention_loss(attentions: Sequence[torch.Tensor], text_lengths: torch.Tensor,
                          audio_lengths: torch.Tensor, cfg: GuidedAttentionConfig,
                          min_text: int = 4, durations: torch.Tensor | None = None) -> torch.Tensor:
    """attentions: the guided layers' weights, each (B, H, L, L) over the packed [text | audio] rows (no prefix);
    ``durations`` (B, S) frames per wrapped token, needed by the aligned target.
    -> the penalty (a scalar; 0 when no row has at least ``min_text`` text positions and one frame)."""
    a = torch.stack([att[:, : cfg.heads] for att in attentions], dim=1)  # (B, layers, h, L, L)
    b, _, _, length, _ = a.shape
    s_max = int(text_lengths.max())
    t_max = int(audio_lengths.max())
    rows = (text_lengths >= min_text) & (audio_lengths > 0)  # (B,)
    if not bool(rows.any()) or t_max == 0:
        return a.new_zeros(())
    q = (text_lengths[:, None] - 1 + torch.arange(t_max, device=a.device)).clamp(max=length - 1)  # (B, T)
    idx = q[:, None, None, :, None].expand(-1, a.shape[1], a.shape[2], -1, length)
    a = a.gather(3, idx)[..., :s_max]  # (B, layers, h, T, S): frame queries over the text keys
    key_ok = torch.arange(s_max, device=a.device)[None, :] < text_lengths[:, None]  # (B, S)
    a = a * key_ok[:, None, None, None, :]
    a = a / a.sum(-1, keepdim=True).clamp_min(1e-8)  # attention over the text only
    if cfg.target == "aligned":
        if durations is None:
            raise DuetError("attention supervision (target aligned) needs batches with durations (timing files)")
        w = aligned_penalty(durations, text_lengths, t_max, s_max, cfg.token_sigma)  # (B, T, S)
    else:
        w = diagonal_penalty(audio_lengths.float(), text_lengths.float(), t_max, s_max, cfg.sigma)  # (B, T, S)
    per_query = (a * w[:, None, None]).sum(-1)  # (B, layers, h, T)
    frame_ok = (torch.arange(t_max, device=a.device)[None, :] < audio_lengths[:, None]) & rows[:, None]  # (B, T)
    weights = frame_ok[:, None, None, :].expand_as(per_query).float()
    return (per_query * weights).sum() / weights.sum()
