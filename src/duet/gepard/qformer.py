"""Gepard's voice-cloning compressor: reference codec codes -> K = 8 speaker tokens (Gepard §2.6, DESIGN §A).

    x_ref    = W_in dequant(codes) + b_in + PE(t)          (B, T, D)  FSQ digits -> [-1, 1]; PE on the reference only
    q^0      = queries                                     (K, D)     learnable, position-less
    q^{l+1}  = block_l(q^l, x_ref, mask)                   l = 0, 1:
               q += SelfAttn(RMSNorm(q));  q += CrossAttn(RMSNorm(q), x_ref, mask);  q += SwiGLU(RMSNorm(q))
    q_normed = RMSNorm(q)                                  (B, K, D)  RMS 1 per token (weight initialised 1)
    prefix_raw = output_scale * q_normed                   output_scale initialised 1/sqrt(D): L2 norm ~1 per token

The structure is BLIP-2's Q-Former (Li et al. 2023) as the report builds it: 2 blocks, 8 heads, pre-norm RMSNorm,
SwiGLU FFN of width 4D. K = 8 is the bottleneck against copying the reference verbatim (§2.6.1). The prefix is
computed once in prefill, never in the decode loop (§1.2).

``null_prefix`` (K x D, std 0.02) is the unconditional path (§2.6.2): a row reads it instead of its own prefix when
a draw with ``cfg_dropout_prob`` = 0.15 says so (training only) OR when it is a null-sentinel row (speaker-less, or a
speaker with a single clip); :func:`null_prefix_rows` is that choice. The compressor and ``null_prefix`` train at
0.1x the base LR (:meth:`QFormer.lr_multipliers`); in fine-tuning and DPO the compressor is frozen (§2.5).

Choices where the report is silent (our reading):

- RMSNorm: ``torch.nn.RMSNorm`` with a learnable weight initialised 1, everywhere including the output norm, which
  is what our reading of the report's 555.7M counts (``qformer_parameters``). ``q_normed`` is that output norm's
  result, so its RMS is 1 per token (up to eps) at initialisation and then moves only by the learned per-channel
  gain, which trains at 0.1x LR; both regularisers below are cosine-based, hence blind to a token's scale.
- Attention projections q, k, v, o and the SwiGLU matrices have no bias; the input projection has one.
- The reference features get no norm of their own before the cross-attention's key / value projections (they are
  already O(1): unit-scale sinusoids plus a projection initialised with std in^-1/2).
- Queries start normal(0, 1): unit RMS, so each query's identity dominates the residual stream at initialisation.
  With BLIP-2's std 0.02 the first cross-attention (near-uniform over the reference at initialisation) would add
  the same pooled vector to every query and start them collapsed, which is what L_div fights.
- Padding is masked with a finite additive mask (``duet.nn.masks.additive``): a row with no valid frame gets a
  finite average instead of NaN (such rows read the null prefix anyway).

The two pretraining regularisers on ``q_normed`` (added unweighted to the loss, §2.5; their definition in §2.6.3 is
lost from our copy of the report):

- ``L_div`` (:func:`diversity_loss`): the mean over rows of the mean over query pairs i != j of cos(q_i, q_j)^2.
  Squared cosine pushes the K tokens towards mutual orthogonality without rewarding anti-parallel pairs, so the
  eight tokens carry eight directions rather than one repeated.
- ``L_supcon`` (:func:`supcon_loss`): supervised contrastive loss (Khosla et al. 2020, the "L_out" form, mean over
  positives outside the log) on one embedding per row, the L2-normalised mean of its K tokens, temperature 0.1.
  Positives are the other rows of the same speaker. Rows flagged invalid (speaker-less, singletons: their speaker
  id is not an identity) take no part at all, neither as anchors nor as negatives; valid rows with no positive
  in the batch are negatives for the others but not anchors. No anchor -> 0, with a graph.

Shape legend: B batch, C FSQ channels (32), T reference frames, K queries (8), D width, H heads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from duet.codecs.fsq import FSQConfig
from duet.nn.masks import additive


@dataclass(frozen=True)
class QFormerConfig:
    width: int  # D, the backbone's width (the prefix tokens sit in its input sequence)
    num_queries: int = 8  # K (§2.6.1)
    num_layers: int = 2  # L (§2.6.1)
    num_heads: int = 8  # §2.6.1
    ffn_multiple: int = 4  # SwiGLU hidden width = 4 D
    channel_levels: tuple[int, ...] = field(default_factory=lambda: FSQConfig().channel_levels)  # L_k, k = 0..31
    cfg_dropout_prob: float = 0.15  # §2.6.2
    lr_multiplier: float = 0.1  # §2.6.1: compressor and null_prefix train at 0.1x
    supcon_weight: float = 1.0  # L_supcon's weight in the loss (§2.5 adds it unweighted; 0 leaves it out)
    max_reference_frames: int = 1024  # 47.6 s at 21.5 frames/s, past the report's longest clip (40 s = 860 frames)
    rms_norm_eps: float = 1e-6  # as the backbone's RMSNorm

    def __post_init__(self) -> None:
        if self.width <= 0 or self.width % self.num_heads or self.width % 2:
            raise ValueError(f"width must be positive, even and divisible by num_heads={self.num_heads}, "
                             f"got {self.width}")
        if min(self.num_queries, self.num_layers, self.ffn_multiple, self.max_reference_frames) <= 0:
            raise ValueError("num_queries, num_layers, ffn_multiple and max_reference_frames must be positive")
        if not self.channel_levels or min(self.channel_levels) < 2:
            raise ValueError(f"every channel needs at least 2 levels, got {self.channel_levels}")
        if not 0.0 <= self.cfg_dropout_prob < 1.0:
            raise ValueError(f"cfg_dropout_prob must lie in [0, 1), got {self.cfg_dropout_prob}")
        if self.supcon_weight < 0.0:
            raise ValueError(f"supcon_weight must not be negative, got {self.supcon_weight}")

    @property
    def num_channels(self) -> int:
        return len(self.channel_levels)


def qformer_parameters(config: QFormerConfig) -> int:
    """Parameters of :class:`QFormer`, from the config alone (42,000,385 at D = 1024 with the report's shape)."""
    d, hidden = config.width, config.ffn_multiple * config.width
    attention = 4 * d * d  # q, k, v, o without bias
    block = 2 * attention + 3 * d * hidden + 3 * d  # self-attn, cross-attn, SwiGLU (gate, up, down), 3 RMSNorms
    queries = null_prefix = config.num_queries * d
    input_proj = config.num_channels * d + d
    return config.num_layers * block + queries + null_prefix + input_proj + d + 1  # + output norm, output_scale


def compressor_lr_multipliers(config: QFormerConfig, prefix: str) -> dict[str, float]:
    """What :meth:`QFormer.lr_multipliers` returns, from the config alone: a training objective sets its parameter
    groups before it sees the module."""
    return {prefix: config.lr_multiplier}


def sinusoidal_positions(num_positions: int, width: int) -> torch.Tensor:
    """Vaswani et al. (2017) positions -> (T, D): [sin(t w_0), cos(t w_0), sin(t w_1), ...], w_i = 10000^(-2i/D)."""
    t = torch.arange(num_positions, dtype=torch.float64)[:, None]  # (T, 1)
    freqs = torch.exp(-math.log(10_000.0) * torch.arange(0, width, 2, dtype=torch.float64) / width)  # (D/2,)
    angles = t * freqs  # (T, D/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(num_positions, width).float()  # (T, D)


def null_prefix_rows(no_speaker: torch.Tensor, drop_prob: float, training: bool,
                     generator: torch.Generator | None = None) -> torch.Tensor:
    """Which rows read ``null_prefix`` (§2.6.2): no_speaker (B,) bool -> (B,) bool.

    Two triggers, OR-ed: the row is a null-sentinel (speaker-less or singleton: always), or a Bernoulli(drop_prob)
    draw from ``generator`` (training only; at inference nothing is random).
    """
    if not training or drop_prob == 0.0:
        return no_speaker.clone()
    device = generator.device if generator is not None else no_speaker.device
    draw = torch.rand(no_speaker.shape, generator=generator, device=device).to(no_speaker.device)  # (B,)
    return no_speaker | (draw < drop_prob)


# ---- regularisers on q_normed (module docstring) -----------------------------------------------------------------


def diversity_loss(q_normed: torch.Tensor) -> torch.Tensor:
    """L_div: q_normed (B, K, D) -> scalar, mean over rows and query pairs i != j of cos(q_i, q_j)^2."""
    k = q_normed.shape[1]
    if k < 2:
        return q_normed.sum() * 0.0
    u = F.normalize(q_normed.float(), dim=-1)  # (B, K, D)
    gram = u @ u.transpose(1, 2)  # (B, K, K)
    off_diagonal = ~torch.eye(k, dtype=torch.bool, device=u.device)
    return gram.square()[:, off_diagonal].mean()  # every row has K (K - 1) pairs: mean of means


def supcon_loss(q_normed: torch.Tensor, speaker_ids: torch.Tensor, temperature: float = 0.1,
                valid: torch.Tensor | None = None) -> torch.Tensor:
    """L_supcon: q_normed (B, K, D), speaker_ids (B,) int, valid (B,) bool -> scalar (Khosla et al. 2020, L_out).

    For each anchor i with positives P(i) (valid rows j != i of i's speaker) and candidates A(i) (valid rows j != i):
    -1/|P(i)| sum_{p in P(i)} log(exp(z_i.z_p / tau) / sum_{a in A(i)} exp(z_i.z_a / tau)), averaged over anchors.
    """
    b = q_normed.shape[0]
    z = F.normalize(q_normed.float().mean(dim=1), dim=-1)  # (B, D): one embedding per row
    if valid is None:
        valid = torch.ones(b, dtype=torch.bool, device=z.device)
    others = valid[None, :] & ~torch.eye(b, dtype=torch.bool, device=z.device)  # (B, B): a != i, a valid
    positive = others & (speaker_ids[:, None] == speaker_ids[None, :])  # (B, B)
    anchor = valid & positive.any(dim=1)  # (B,)
    if not bool(anchor.any()):
        return q_normed.sum() * 0.0
    logits = (z[anchor] @ z.T / temperature).masked_fill(~others[anchor], float("-inf"))  # (A, B)
    log_prob = logits - logits.logsumexp(dim=1, keepdim=True)  # (A, B); -inf only off the candidates
    pos = positive[anchor]
    return (-log_prob.masked_fill(~pos, 0.0).sum(dim=1) / pos.sum(dim=1)).mean()


# ---- modules ------------------------------------------------------------------------------------------------------


class Attention(nn.Module):
    """Multi-head attention from queries (B, K, D) to a context (B, N, D); self-attention when context is queries."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(width, width, bias=False) for _ in range(4))

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        return x.view(b, n, self.heads, d // self.heads).transpose(1, 2)  # (B, H, N, D/H)

    def forward(self, x: torch.Tensor, context: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """mask: additive (B, 1, 1, N) over the context's positions, or None."""
        q, k, v = self._split(self.q_proj(x)), self._split(self.k_proj(context)), self._split(self.v_proj(context))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, K, D/H)
        b, h, n, e = a.shape
        return self.o_proj(a.transpose(1, 2).reshape(b, n, h * e))  # (B, K, D)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)), no biases (Shazeer 2020)."""

    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(width, hidden, bias=False)
        self.up_proj = nn.Linear(width, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class QFormerBlock(nn.Module):
    """Pre-norm: self-attention over the queries -> masked cross-attention to the reference -> SwiGLU FFN."""

    def __init__(self, config: QFormerConfig):
        super().__init__()
        d, eps = config.width, config.rms_norm_eps
        self.self_norm = nn.RMSNorm(d, eps=eps)
        self.self_attn = Attention(d, config.num_heads)
        self.cross_norm = nn.RMSNorm(d, eps=eps)
        self.cross_attn = Attention(d, config.num_heads)
        self.ffn_norm = nn.RMSNorm(d, eps=eps)
        self.ffn = SwiGLU(d, config.ffn_multiple * d)

    def forward(self, q: torch.Tensor, reference: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """q (B, K, D), reference (B, T, D), mask additive (B, 1, 1, T) -> (B, K, D)."""
        h = self.self_norm(q)
        q = q + self.self_attn(h, h)
        q = q + self.cross_attn(self.cross_norm(q), reference, mask)
        return q + self.ffn(self.ffn_norm(q))


@dataclass
class QFormerOutput:
    """What the compressor gives one batch; every tensor (B, K, D) but ``is_null`` (B,)."""

    prefix: torch.Tensor  # what the decoder reads: prefix_raw, or null_prefix where is_null
    prefix_raw: torch.Tensor  # output_scale * q_normed
    q_normed: torch.Tensor  # RMSNorm(q), for L_div and L_supcon
    is_null: torch.Tensor  # rows that read null_prefix


class QFormer(nn.Module):
    """Reference channel codes (B, C, T) + valid mask (B, T) -> K speaker tokens (module docstring)."""

    def __init__(self, config: QFormerConfig):
        super().__init__()
        self.config = config
        d, k = config.width, config.num_queries
        self.input_proj = nn.Linear(config.num_channels, d)
        self.queries = nn.Parameter(torch.empty(k, d))
        self.blocks = nn.ModuleList([QFormerBlock(config) for _ in range(config.num_layers)])
        self.output_norm = nn.RMSNorm(d, eps=config.rms_norm_eps)
        self.output_scale = nn.Parameter(torch.empty(()))
        self.null_prefix = nn.Parameter(torch.empty(k, d))
        half = torch.tensor(config.channel_levels) // 2
        self.register_buffer("half_levels", half.view(1, -1, 1), persistent=False)  # (1, C, 1): L_k // 2
        positions = sinusoidal_positions(config.max_reference_frames, d)
        self.register_buffer("positions", positions, persistent=False)  # (T_max, D)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.input_proj.weight, std=self.config.num_channels ** -0.5)  # O(1) features, like PE
        nn.init.zeros_(self.input_proj.bias)
        nn.init.normal_(self.queries, std=1.0)  # module docstring: distinct queries from the start
        nn.init.constant_(self.output_scale, self.config.width ** -0.5)  # §2.6.1: prefix L2 norm ~1 per token
        nn.init.normal_(self.null_prefix, std=0.02)  # §2.6.2

    def lr_multipliers(self, prefix: str) -> dict[str, float]:
        """Parameter-name prefix -> LR multiplier, for ``duet.train.loop.param_groups``; ``prefix`` is this module's
        name in the model (``"qformer."``). One entry covers the compressor and ``null_prefix``."""
        return compressor_lr_multipliers(self.config, prefix)

    def dequantise(self, codes: torch.Tensor) -> torch.Tensor:
        """Channel digits (B, C, T), 0 <= codes[:, k] < L_k -> FSQ values (B, C, T) in [-1, 1].

        (digit - L // 2) / (L // 2), NeMo's dequantisation (DESIGN §A, ``GroupFSQ.channels_to_dequantised``).
        """
        half = self.half_levels
        return (codes - half).float() / half

    def encode(self, codes: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """codes (B, C, T) channel digits, mask (B, T) bool (True on real frames) -> prefix_raw, q_normed (B, K, D)."""
        b, c, t = codes.shape
        if c != self.config.num_channels or mask.shape != (b, t):
            raise ValueError(f"expected codes (B, {self.config.num_channels}, T) and mask (B, T), "
                             f"got {tuple(codes.shape)} and {tuple(mask.shape)}")
        if t > self.config.max_reference_frames:
            raise ValueError(f"reference of {t} frames is longer than max_reference_frames="
                             f"{self.config.max_reference_frames}")
        dtype = self.input_proj.weight.dtype
        x = self.dequantise(codes).transpose(1, 2).to(dtype)  # (B, T, C)
        reference = self.input_proj(x) + self.positions[:t].to(dtype)  # (B, T, D); the queries get no positions
        attn_mask = additive(mask[:, None, None, :], dtype)  # (B, 1, 1, T)
        q = self.queries.expand(b, -1, -1)  # (B, K, D)
        for block in self.blocks:
            q = block(q, reference, attn_mask)
        q_normed = self.output_norm(q)  # (B, K, D)
        return self.output_scale * q_normed, q_normed

    def null(self, batch_size: int) -> torch.Tensor:
        """The unconditional prefix for ``batch_size`` rows (B, K, D), e.g. a request without a reference voice."""
        return self.null_prefix.expand(batch_size, -1, -1)

    def forward(self, codes: torch.Tensor, mask: torch.Tensor, no_speaker: torch.Tensor | None = None,
                generator: torch.Generator | None = None) -> QFormerOutput:
        """codes (B, C, T), mask (B, T), no_speaker (B,) bool (null-sentinel rows) -> :class:`QFormerOutput`.

        In training mode a row also reads ``null_prefix`` with probability ``cfg_dropout_prob`` (drawn from
        ``generator``); in eval mode only the ``no_speaker`` rows do.
        """
        prefix_raw, q_normed = self.encode(codes, mask)
        if no_speaker is None:
            no_speaker = torch.zeros(codes.shape[0], dtype=torch.bool, device=codes.device)
        is_null = null_prefix_rows(no_speaker, self.config.cfg_dropout_prob, self.training, generator)
        prefix = torch.where(is_null[:, None, None], self.null(codes.shape[0]).to(prefix_raw.dtype), prefix_raw)
        return QFormerOutput(prefix=prefix, prefix_raw=prefix_raw, q_normed=q_normed, is_null=is_null)


def voice_regularisers(out: QFormerOutput, reference_mask: torch.Tensor, speaker_ids: torch.Tensor,
                       no_speaker: torch.Tensor) -> dict[str, torch.Tensor]:
    """L_div and L_supcon (§2.5, ``duet.gepard.qformer``) over the rows that have a reference -> {"div", "supcon"}.

    A row without a reference frame encoded nothing (its q_normed is the queries' reading of padding), so it takes
    no part; neither does a null-sentinel row in L_supcon (its speaker id is no identity). Rows the dropout sent to
    ``null_prefix`` still count: their compressor output is real, only the decoder did not read it. Both terms are
    a zero with a graph when no row qualifies.
    """
    has_reference = reference_mask.any(dim=1)  # (B,)
    q = out.q_normed  # (B, K, D)
    div = diversity_loss(q[has_reference]) if bool(has_reference.any()) else q.sum() * 0.0
    supcon = supcon_loss(q, speaker_ids, valid=has_reference & ~no_speaker)
    return {"div": div, "supcon": supcon}
