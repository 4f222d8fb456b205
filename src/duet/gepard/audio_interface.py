"""Gepard's audio interface: 32 FSQ channel codes of a frame -> one frame embedding (Gepard §2.4, §3.1).

    e_k = E_k[c_k],  E_k in R^{L_k x m}                       32 lookup tables, k = 0..31
    u   = [e_0; e_1; ...; e_31]  in R^{32 m}                  concatenation (not a sum: §2.4 decision 1)
    z   = LN_affine_free(W2 GELU(W1 u + b1) + b2)            W1: 32m -> D, W2: D -> D (§2.4 decisions 2-3)
    x   = s_audio * z,  s_audio = std(text embed_tokens)      non-learnable buffer (§2.4 decision 4)

m: the report prints "m = 2" once, but also u in R^{32m = 1024} and, in its effective-rank section (§3.1), tables of
shape [L_k x 32]; m = 32 is the consistent reading (DESIGN §A) and gepard-500m uses it. Smaller presets keep
32 m = D (gepard-tiny: m = 8, D = 256), so the concatenation is as wide as the model, as in the report.

Initialisation (§3.1 item 3, "muP principles"): tables normal with variance 1.0; W1, W2 normal with std in^-1/2;
zero biases. ``s_audio`` is set from the text embedding when the model is built, and must be refreshed
(:meth:`AudioInterface.set_scale`) after a pretrained text embedding is loaded: it "aligns the scales of the two
modalities" from the first step.

The 32 tables are stored stacked as one (sum L_k) x m parameter, ``tables.weight``, with row offsets: E_k is rows
[offset_k, offset_k + L_k). Every row belongs to exactly one channel, so this is the same function and the same
gradients as 32 separate tables, in one lookup; :meth:`AudioInterface.table` returns E_k.

Shape legend: B batch, T frames, C channels (32), m table width, D model width.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from duet.gepard.config import GepardConfig


def channel_offsets(levels: tuple[int, ...]) -> torch.Tensor:
    """Start row of each channel's block in a stacked (sum L_k)-row layout: [0, 8, 15, 21, 27, 35, ...]."""
    return torch.cumsum(torch.tensor((0,) + tuple(levels[:-1])), dim=0)


class AudioInterface(nn.Module):
    """channel codes (B, T, C) int64 -> frame embeddings (B, T, D)."""

    def __init__(self, config: GepardConfig):
        super().__init__()
        self.levels = tuple(config.channel_levels)
        self.embed_dim = config.audio_embed_dim
        c, m, d = config.num_channels, config.audio_embed_dim, config.width
        self.tables = nn.Embedding(config.num_logits, m)
        self.fc1 = nn.Linear(c * m, d)
        self.fc2 = nn.Linear(d, d)
        self.register_buffer("offsets", channel_offsets(self.levels), persistent=False)
        # Persistent: a checkpoint carries the scale it was trained with (vLLM loads it like any tensor).
        self.register_buffer("s_audio", torch.ones(()))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.tables.weight, mean=0.0, std=1.0)  # variance 1.0
        for linear in (self.fc1, self.fc2):
            nn.init.normal_(linear.weight, mean=0.0, std=linear.in_features ** -0.5)
            nn.init.zeros_(linear.bias)

    @torch.no_grad()
    def set_scale(self, text_embedding: torch.Tensor) -> None:
        """s_audio <- std(text embedding weight), over all entries (§2.4: s_audio <- std(embed_tokens))."""
        self.s_audio.copy_(text_embedding.detach().float().std())

    def table(self, k: int) -> torch.Tensor:
        """E_k, the (L_k, m) lookup table of channel k (a view into the stacked parameter)."""
        start = int(sum(self.levels[:k]))
        return self.tables.weight[start : start + self.levels[k]]

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """codes (B, T, C) with 0 <= codes[..., k] < L_k -> x_audio (B, T, D)."""
        b, t, c = codes.shape
        e = self.tables(codes + self.offsets)  # (B, T, C, m)
        u = e.reshape(b, t, c * self.embed_dim)  # (B, T, C*m): [e_0; ...; e_31]
        h = self.fc2(F.gelu(self.fc1(u)))  # (B, T, D)
        z = F.layer_norm(h, h.shape[-1:])  # affine-free LayerNorm (no gamma, beta)
        return self.s_audio.to(z.dtype) * z  # (B, T, D)
