"""Qwen3 for inference in plain torch: the function of transformers' ``Qwen3Model``, op for op, on its parameters.

Why a second copy of the forward pass: a tiny model's decode step is a few hundred small ops, and transformers'
Python around them (mask builders, cache objects, output records, per-module hooks) cost as much again; importing
transformers also takes about three seconds of a one-sentence ``duet speak``. Training keeps the stock
``Qwen3Model`` (``duet.nn.backbone``; Gepard §2.2: no fork, no hooks). This module reads the same parameters under
the same names, from a stock model or from :class:`Qwen3Weights`, the same module tree built without transformers
(what an inference-only loader fills from a checkpoint; ``duet.nn.backbone.run_backbone`` runs either).

Exactness. Each op is the one transformers runs: RMSNorm in float32 as ``weight * (x * rsqrt(mean(x^2) + eps))``
(``F.rms_norm``, the same bits); RoPE as ``x cos + rotate_half(x) sin`` with ``rotate_half`` folded into a roll and
a signed sine (a sign flip is exact); attention through ``scaled_dot_product_attention`` with the arguments
transformers' sdpa path passes: ``enable_gqa`` without a mask, key/value heads repeated with a mask, the causal flag
for a prompt. Two fusions keep the bits on the CPUs we measured (tested in ``tests/nn/test_qwen3.py``): the q/k/v
projections as one matmul, and the gate/up projections as one. So a decode step of one row gives the bits of the
stock model's. Rows of different lengths in one batch are right-padded and masked, as the stock path does them;
there a row can differ from its lone decode in the last bit (a matmul over M rows need not round as one over 1).

The fused weights are a snapshot taken when :class:`Qwen3Step` is built: build it after loading, not before
training the model further.

Shape legend: B rows, L new positions, P cached positions, D width, H query heads, H_kv key/value heads, hd head_dim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn
from torch.nn import functional as F

from duet.errors import DuetError
from duet.nn.backbone import BackboneConfig, PlainBackbone

# ---- the module tree of transformers' Qwen3Model, without transformers -----------------------------------------------


class Weight(nn.Module):
    """A parameter under the name ``weight``, left uninitialised (a loader fills it): an ``nn.Linear`` without
    bias, an ``nn.Embedding`` or an RMSNorm gain, as the state dict names them."""

    def __init__(self, *shape: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(shape))


class RMSNorm(Weight):
    def __init__(self, width: int, eps: float):
        super().__init__(width)
        self.variance_epsilon = eps


class Attention(nn.Module):
    def __init__(self, config: BackboneConfig):
        super().__init__()
        d, hd = config.width, config.head_dim
        self.q_proj = Weight(config.num_heads * hd, d)
        self.k_proj = Weight(config.num_kv_heads * hd, d)
        self.v_proj = Weight(config.num_kv_heads * hd, d)
        self.o_proj = Weight(d, config.num_heads * hd)
        self.q_norm = RMSNorm(hd, config.rms_norm_eps)
        self.k_norm = RMSNorm(hd, config.rms_norm_eps)


class MLP(nn.Module):
    def __init__(self, config: BackboneConfig):
        super().__init__()
        self.gate_proj = Weight(config.mlp_width, config.width)
        self.up_proj = Weight(config.mlp_width, config.width)
        self.down_proj = Weight(config.width, config.mlp_width)


class DecoderLayer(nn.Module):
    def __init__(self, config: BackboneConfig):
        super().__init__()
        self.self_attn = Attention(config)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.width, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.width, config.rms_norm_eps)


class Qwen3Weights(PlainBackbone):
    """``Qwen3Model``'s parameters under its names (``embed_tokens``, ``layers.N.self_attn.q_proj``, ..., ``norm``),
    built without transformers: filled by ``load_state_dict`` and run by :class:`Qwen3Step` (``run_backbone``
    reads it too). For loading only: the tensors start uninitialised (initialising what a loader overwrites cost a
    tenth of a second of ``duet speak``), so train a stock model."""

    def __init__(self, config: BackboneConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.width, _weight=torch.empty(config.vocab_size,
                                                                                              config.width))
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.width, config.rms_norm_eps)
        self._step: Qwen3Step | None = None
        self.register_load_state_dict_post_hook(lambda module, keys: module.forget())

    def step(self) -> "Qwen3Step":
        """The forward pass over these weights (built on first use; rebuilt after loading or moving them)."""
        if self._step is None:
            self._step = Qwen3Step(self)
        return self._step

    def new_cache(self) -> "GrowingCache":
        return GrowingCache()

    def run(self, inputs_embeds: torch.Tensor, *, cache: "GrowingCache | None" = None,
            position_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``duet.nn.backbone.run_backbone`` for these weights: causal attention, continuing ``cache`` if given, or
        ``attention_mask`` (B, 1, L, L) as the whole attention pattern (a duration predictor's bidirectional one)."""
        b, n = inputs_embeds.shape[:2]
        if cache is not None and attention_mask is not None:
            raise DuetError("a Qwen3Weights backbone takes a cache or a mask, not both")
        if position_ids is None:
            start = cache.get_seq_length() if cache is not None else 0
            position_ids = torch.arange(start, start + n, device=inputs_embeds.device)
        kv: KV = cache if cache is not None else Uncached(attention_mask)
        return self.step()(inputs_embeds, position_ids.expand(b, n), kv)

    def forget(self) -> None:
        self._step = None

    def _apply(self, fn, recurse=True):  # .to(), .float(), ...: the fused copies would keep the old tensors
        self.forget()
        return super()._apply(fn, recurse)


def backbone_config(model: nn.Module) -> BackboneConfig:
    """The shape of a stock ``Qwen3Model`` or a :class:`Qwen3Weights`."""
    if isinstance(model, Qwen3Weights):
        return model.config
    c = model.config  # transformers' Qwen3Config
    return BackboneConfig(num_layers=c.num_hidden_layers, width=c.hidden_size, num_heads=c.num_attention_heads,
                          num_kv_heads=c.num_key_value_heads, head_dim=c.head_dim, mlp_width=c.intermediate_size,
                          vocab_size=c.vocab_size, rope_theta=c.rope_parameters["rope_theta"],
                          max_positions=c.max_position_embeddings, rms_norm_eps=c.rms_norm_eps)


# ---- the forward pass ---------------------------------------------------------------------------------------------


class KV(Protocol):
    """Where a forward pass keeps and reads keys and values: ``attend`` stores the new positions' k, v of one layer
    and returns the attention output of q over everything the rows may see."""

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
        """q (B, H, L, hd), k and v (B, H_kv, L, hd) -> (B, H, L, hd)."""
        ...


def rope_tables(config: BackboneConfig, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """cos and signed sin (max_positions, hd) float32, as transformers' default RoPE computes them per position
    (``inv_freq = 1 / base^(2i / hd)``; ``emb = [f, f]``); the sine's first half is negated, which folds
    ``rotate_half`` into a roll."""
    hd = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float) / hd))
    positions = torch.arange(config.max_positions, dtype=torch.float)
    freqs = positions[:, None] * inv_freq  # (P, hd / 2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (P, hd)
    cos, sin = emb.cos() * 1.0, emb.sin() * 1.0  # transformers' attention_scaling: 1.0 for the default type
    sin = torch.cat((-sin[:, : hd // 2], sin[:, hd // 2 :]), dim=-1)
    return cos.to(device), sin.to(device)


@dataclass(frozen=True)
class _Layer:
    norm1: torch.Tensor  # (D,)
    qkv: torch.Tensor  # (H hd + 2 H_kv hd, D): q, k, v projections stacked
    qk_norm: torch.Tensor  # (H + H_kv, hd): q_norm's weight for each query head, then k_norm's for each key head
    o: torch.Tensor  # (D, H hd)
    norm2: torch.Tensor  # (D,)
    gate_up: torch.Tensor  # (2 M, D): gate and up projections stacked
    down: torch.Tensor  # (D, M)


class Qwen3Step:
    """The forward pass of a stock ``Qwen3Model`` or a :class:`Qwen3Weights` (module docstring), from input
    embeddings to the final norm's output."""

    def __init__(self, model: nn.Module):
        config = backbone_config(model)
        self.config = config
        self.heads, self.kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        self.eps = config.rms_norm_eps
        self.scale = config.head_dim ** -0.5
        h, hkv, hd = self.heads, self.kv_heads, self.head_dim
        layers = []
        with torch.no_grad():
            for layer in model.layers:
                a, mlp = layer.self_attn, layer.mlp
                layers.append(_Layer(
                    norm1=layer.input_layernorm.weight.detach(),
                    qkv=torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).detach(),
                    qk_norm=torch.cat([a.q_norm.weight.expand(h, hd), a.k_norm.weight.expand(hkv, hd)]).detach(),
                    o=a.o_proj.weight.detach(),
                    norm2=layer.post_attention_layernorm.weight.detach(),
                    gate_up=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).detach(),
                    down=mlp.down_proj.weight.detach()))
        self.layers = layers
        self.norm = model.norm.weight.detach()
        self.cos, self.sin = rope_tables(config, self.norm.device)
        self.cos, self.sin = self.cos.to(self.norm.dtype), self.sin.to(self.norm.dtype)

    def __call__(self, x: torch.Tensor, positions: torch.Tensor, kv: KV) -> torch.Tensor:
        """x (B, L, D), positions (B, L) int64 -> hidden (B, L, D) after the final norm."""
        b, n, d = x.shape
        h, hkv, hd, eps = self.heads, self.kv_heads, self.head_dim, self.eps
        cos = self.cos[positions][:, None]  # (B, 1, L, hd)
        sin = self.sin[positions][:, None]
        for i, p in enumerate(self.layers):
            y = F.rms_norm(x, (d,), p.norm1, eps)
            qkv = F.linear(y, p.qkv).view(b, n, h + 2 * hkv, hd)  # (B, L, H + 2 H_kv, hd)
            qk = (p.qk_norm * F.rms_norm(qkv[:, :, : h + hkv], (hd,), None, eps)).transpose(1, 2)  # (B, H+H_kv, L, hd)
            qk = qk * cos + qk.roll(hd // 2, dims=-1) * sin  # RoPE: rotate_half(x) = roll(x) * [-1.., +1..]
            v = qkv[:, :, h + hkv :].transpose(1, 2)  # (B, H_kv, L, hd)
            o = kv.attend(i, qk[:, :h], qk[:, h:], v, self.scale)  # (B, H, L, hd)
            x = x + F.linear(o.transpose(1, 2).reshape(b, n, h * hd), p.o)
            y = F.rms_norm(x, (d,), p.norm2, eps)
            gate, up = F.linear(y, p.gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, p.down)
        return F.rms_norm(x, (d,), self.norm, eps)


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(B, H_kv, L, hd) -> (B, H_kv * groups, L, hd), each key/value head repeated for its query heads."""
    if groups == 1:
        return x
    b, hkv, n, hd = x.shape
    return x[:, :, None].expand(b, hkv, groups, n, hd).reshape(b, hkv * groups, n, hd)


class Uncached:
    """No cache: causal attention over the given positions, or any additive / boolean ``mask`` (B, 1, L, L)
    (bidirectional: a duration predictor)."""

    def __init__(self, mask: torch.Tensor | None = None):
        self.mask = mask

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
        if self.mask is None:
            return F.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=q.shape[2] > 1, enable_gqa=True)
        groups = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(q, repeat_kv(k, groups), repeat_kv(v, groups), attn_mask=self.mask,
                                              scale=scale)


class GrowingCache:
    """A cache that grows with its rows, all of one length: a prompt, then one or more positions per call (the
    offline sampler's oracle path, ``duet.gepard.generate``). ``keys`` / ``values``: per layer (B, H_kv, P, hd)."""

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    def get_seq_length(self) -> int:
        return self.keys[0].shape[2] if self.keys else 0

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
        past = 0
        if layer < len(self.keys):
            past = self.keys[layer].shape[2]
            k = torch.cat([self.keys[layer], k], dim=2)
            v = torch.cat([self.values[layer], v], dim=2)
            self.keys[layer], self.values[layer] = k, v
        else:
            self.keys.append(k)
            self.values.append(v)
        n = q.shape[2]
        if n == 1 or past == 0:
            return F.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=n > 1, enable_gqa=True)
        seen = torch.arange(past + n, device=q.device)[None] <= (past + torch.arange(n, device=q.device))[:, None]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=seen, scale=scale, enable_gqa=True)
