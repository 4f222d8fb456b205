"""Residual vector quantisation with EMA codebooks, k-means initialisation, dead-code reset and quantiser dropout.

Zeghidour et al., "SoundStream" (arXiv:2107.03312) for residual VQ and quantiser dropout; van den Oord et al.,
"Neural Discrete Representation Learning" (arXiv:1711.00937) for EMA codebook updates and the commitment loss.
Luna-Codec (Luna report §2.2, DESIGN.md §B) uses Q = 8 codebooks of K = 2048 entries at 25 Hz (2.2 kbps).

Shape legend: B batch, D latent width, T frames, Q codebooks, K entries per codebook, N = B * T vectors.

Codebooks are not trained by gradients: each one moves towards the mean of the vectors assigned to it
(exponential moving average), which is stable on small CPU batches. Under ``torch.distributed`` the EMA statistics
are summed over processes so every replica keeps the same codebooks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class RVQConfig:
    dim: int = 256  # latent width D
    num_quantizers: int = 8  # Q
    codebook_size: int = 2048  # K
    commitment_weight: float = 0.25  # beta in VQ-VAE: pulls the encoder towards its codes
    ema_decay: float = 0.99
    kmeans_init: bool = True  # initialise each codebook by k-means on its first training batch
    kmeans_iters: int = 10
    dead_code_threshold: float = 0.5  # EMA usage (assignments per step) below which a code is re-seeded
    quantizer_dropout: float = 0.5  # probability that a training batch uses only the first n ~ U{1..Q} codebooks
    eps: float = 1e-5


@dataclass(frozen=True)
class RVQOutput:
    quantized: torch.Tensor  # (B, D, T) with a straight-through gradient to the input
    codes: torch.Tensor  # (B, Q, T) int64
    commit_loss: torch.Tensor  # scalar, already weighted by commitment_weight
    num_active: int  # codebooks that contributed to `quantized` (< Q under quantiser dropout)


def _all_reduce_sum(x: torch.Tensor) -> torch.Tensor:
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
    return x


def kmeans(vectors: torch.Tensor, k: int, iters: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Lloyd k-means with k-means++ seeding: vectors (N, D) -> centroids (K, D).

    With fewer vectors than codes (N < K) the centroids are vectors drawn with replacement (dead-code reset spreads
    them later). Empty clusters keep their previous centroid.
    """
    n = vectors.shape[0]
    if n < k:
        return vectors[torch.randint(0, n, (k,), generator=generator, device=vectors.device)].clone()
    # k-means++ (Arthur & Vassilvitskii 2007): each new seed drawn with probability proportional to its squared
    # distance from the seeds so far, so that separated clusters each get a seed.
    first = int(torch.randint(0, n, (1,), generator=generator))
    centroids = vectors[first : first + 1].clone()  # (1, D)
    nearest = (vectors - centroids).pow(2).sum(dim=1)  # (N,)
    for _ in range(1, k):
        probs = nearest / nearest.sum() if nearest.sum() > 0 else torch.full_like(nearest, 1.0 / n)
        pick = int(torch.multinomial(probs, 1, generator=generator))
        centroids = torch.cat([centroids, vectors[pick : pick + 1]])
        nearest = torch.minimum(nearest, (vectors - vectors[pick]).pow(2).sum(dim=1))
    for _ in range(iters):
        assign = torch.cdist(vectors, centroids).argmin(dim=1)  # (N,)
        sums = torch.zeros_like(centroids).index_add_(0, assign, vectors)
        counts = torch.bincount(assign, minlength=k).unsqueeze(1).to(vectors.dtype)  # (K, 1)
        centroids = torch.where(counts > 0, sums / counts.clamp(min=1), centroids)
    return centroids


class VectorQuantizer(nn.Module):
    """One EMA codebook of K entries of width D."""

    def __init__(self, config: RVQConfig):
        super().__init__()
        self.config = config
        k, d = config.codebook_size, config.dim
        self.register_buffer("codebook", torch.randn(k, d) * 0.1)  # (K, D)
        self.register_buffer("ema_count", torch.ones(k))  # (K,) EMA of assignments per step
        self.register_buffer("ema_sum", self.codebook.clone())  # (K, D) EMA of assigned vector sums
        self.register_buffer("initialised", torch.tensor(not config.kmeans_init))

    def assign(self, vectors: torch.Tensor) -> torch.Tensor:
        """vectors (N, D) -> nearest code index (N,)."""
        # ||x - c||^2 = ||x||^2 - 2 x.c + ||c||^2; ||x||^2 is constant per row and drops out of the argmin.
        scores = vectors @ self.codebook.t() * 2 - self.codebook.pow(2).sum(dim=1)  # (N, K)
        return scores.argmax(dim=1)

    def lookup(self, codes: torch.Tensor) -> torch.Tensor:
        """codes (...) -> vectors (..., D)."""
        return F.embedding(codes, self.codebook)

    @torch.no_grad()
    def update(self, vectors: torch.Tensor) -> None:
        """vectors (N, D): k-means on the first call, then an EMA step towards the assigned means and a re-seed
        of dead codes from this batch."""
        cfg = self.config
        if not bool(self.initialised):
            centroids = _all_reduce_sum(kmeans(vectors, cfg.codebook_size, cfg.kmeans_iters))
            if dist.is_available() and dist.is_initialized():
                centroids /= dist.get_world_size()
            self.codebook.copy_(centroids)
            self.ema_sum.copy_(centroids)
            self.ema_count.fill_(1.0)
            self.initialised.fill_(True)
            return
        codes = self.assign(vectors)  # (N,)
        counts = _all_reduce_sum(torch.bincount(codes, minlength=cfg.codebook_size).to(vectors.dtype))  # (K,)
        sums = _all_reduce_sum(torch.zeros_like(self.codebook).index_add_(0, codes, vectors))  # (K, D)
        self.ema_count.mul_(cfg.ema_decay).add_(counts, alpha=1 - cfg.ema_decay)
        self.ema_sum.mul_(cfg.ema_decay).add_(sums, alpha=1 - cfg.ema_decay)
        # Laplace smoothing keeps rarely used codes from dividing by ~0.
        total = self.ema_count.sum()
        smoothed = (self.ema_count + cfg.eps) / (total + cfg.codebook_size * cfg.eps) * total
        self.codebook.copy_(self.ema_sum / smoothed.unsqueeze(1))
        self._reset_dead(vectors)

    def _reset_dead(self, vectors: torch.Tensor) -> None:
        dead = self.ema_count < self.config.dead_code_threshold  # (K,)
        n_dead = int(dead.sum())
        if n_dead == 0:
            return
        # Same random rows on every replica: draw on rank 0's batch and broadcast.
        fresh = vectors[torch.randint(0, vectors.shape[0], (n_dead,), device=vectors.device)]
        if dist.is_available() and dist.is_initialized():
            dist.broadcast(fresh, src=0)
        self.codebook[dead] = fresh
        self.ema_sum[dead] = fresh
        self.ema_count[dead] = 1.0


class ResidualVQ(nn.Module):
    """Q quantisers in sequence, each coding what the previous ones left over."""

    def __init__(self, config: RVQConfig = RVQConfig()):
        super().__init__()
        self.config = config
        self.quantizers = nn.ModuleList(VectorQuantizer(config) for _ in range(config.num_quantizers))

    @property
    def codebook_sizes(self) -> tuple[int, ...]:
        return (self.config.codebook_size,) * self.config.num_quantizers

    def _num_active(self) -> int:
        cfg = self.config
        if self.training and cfg.quantizer_dropout > 0 and torch.rand(()) < cfg.quantizer_dropout:
            return int(torch.randint(1, cfg.num_quantizers + 1, ()))
        return cfg.num_quantizers

    def forward(self, latent: torch.Tensor) -> RVQOutput:
        """latent (B, D, T) -> RVQOutput; in training mode codebooks update and quantiser dropout applies."""
        b, d, t = latent.shape
        if d != self.config.dim:
            raise ValueError(f"expected latent (B, {self.config.dim}, T), got {tuple(latent.shape)}")
        vectors = latent.permute(0, 2, 1).reshape(b * t, d)  # (N, D)
        residual = vectors.detach()
        quantized = torch.zeros_like(vectors)
        num_active = self._num_active()
        codes = []
        for q, vq in enumerate(self.quantizers):
            if self.training and q < num_active:
                vq.update(residual)
            idx = vq.assign(residual)  # (N,)
            chosen = vq.lookup(idx)  # (N, D)
            if q < num_active:
                quantized = quantized + chosen
            residual = residual - chosen
            codes.append(idx)
        # Commitment keeps the encoder close to what the active codebooks can express (codebooks move by EMA).
        commit = F.mse_loss(vectors, quantized.detach())
        # Straight-through: forward uses the codes, backward passes the gradient to the encoder unchanged.
        out = vectors + (quantized - vectors).detach()
        out = out.view(b, t, d).permute(0, 2, 1)  # (B, D, T)
        codes_t = torch.stack(codes, dim=0).view(self.config.num_quantizers, b, t).permute(1, 0, 2)  # (B, Q, T)
        return RVQOutput(out, codes_t, commit * self.config.commitment_weight, num_active)

    def encode(self, latent: torch.Tensor) -> torch.Tensor:
        """latent (B, D, T) -> codes (B, Q, T), no codebook updates."""
        was_training = self.training
        self.eval()
        try:
            return self.forward(latent).codes
        finally:
            self.train(was_training)

    def decode(self, codes: torch.Tensor, num_quantizers: int | None = None) -> torch.Tensor:
        """codes (B, Q', T) -> latent (B, D, T) summing the first ``num_quantizers`` (default all Q') codebooks."""
        if codes.dim() != 3 or codes.shape[1] > self.config.num_quantizers:
            raise ValueError(f"expected codes (B, <= {self.config.num_quantizers}, T), got {tuple(codes.shape)}")
        if codes.numel() and (codes.min() < 0 or codes.max() >= self.config.codebook_size):
            raise ValueError(f"codes must lie in [0, {self.config.codebook_size})")
        n = codes.shape[1] if num_quantizers is None else num_quantizers
        out = sum(self.quantizers[q].lookup(codes[:, q]) for q in range(n))  # (B, T, D)
        return out.permute(0, 2, 1)  # (B, D, T)
