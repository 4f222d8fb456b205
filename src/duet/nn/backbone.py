"""The stock transformer backbone: transformers' ``Qwen3Model``, built from a small frozen config.

Gepard §2.2: "the backbone remains a standard full-attention transformer without custom operations, and its
structure is not modified during TTS training"; it "runs with use_cache=False during training; there are no
layer-level hooks or overrides inside it". So this module only *builds* a ``Qwen3Model`` and calls it with
``inputs_embeds``: no subclass, no patched attention, no extra op, which is what lets transformers and vLLM
load the weights unchanged.

Parameter names. The ``Qwen3Model`` is always registered as a submodule called ``model``, exactly as
``Qwen3ForCausalLM`` does, so a state dict reads::

    model.embed_tokens.weight
    model.layers.{N}.self_attn.{q,k,v,o}_proj.weight   model.layers.{N}.self_attn.{q,k}_norm.weight
    model.layers.{N}.mlp.{gate,up,down}_proj.weight    model.layers.{N}.{input,post_attention}_layernorm.weight
    model.norm.weight

which is ``Qwen3ForCausalLM`` minus ``lm_head`` (tied to ``embed_tokens`` in the small Qwen3 checkpoints anyway),
and what vLLM's ``qwen3.py`` loader expects (its ``Qwen3ForCausalLM`` holds ``self.model = Qwen3Model(...)`` and
stacks ``q/k/v_proj`` -> ``qkv_proj`` and ``gate/up_proj`` -> ``gate_up_proj`` itself while loading).
Model families (``duet.gepard.model``) register the Qwen3Model as ``model`` on themselves too, via
:func:`build_qwen3`, and run it with :func:`run_backbone`; :class:`Backbone` is the bare container.

An inference-only loader may build the same parameters without transformers (``duet.nn.qwen3.Qwen3Weights``, run
op for op as transformers runs them); :func:`run_backbone` and :func:`new_cache` take either (such a module brings
its own ``run`` and ``new_cache``). transformers is imported when a stock model is built or run, not when this
module is imported.

Shape legend: B batch, L sequence positions (prefix + text + audio), D model width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from duet.errors import DuetError

if TYPE_CHECKING:
    from transformers import Qwen3Config, Qwen3Model


@dataclass(frozen=True)
class BackboneConfig:
    """Shape of a Qwen3 backbone; the fields map one to one onto ``transformers.Qwen3Config``."""

    num_layers: int
    width: int  # D, hidden_size
    num_heads: int  # query heads
    num_kv_heads: int  # key/value heads (grouped-query attention when < num_heads)
    head_dim: int
    mlp_width: int  # intermediate_size of the SwiGLU MLP
    vocab_size: int  # rows of the text embedding (embed_tokens)
    rope_theta: float = 1_000_000.0
    max_positions: int = 4096
    rms_norm_eps: float = 1e-6
    attention_dropout: float = 0.0
    initializer_range: float = 0.02  # std of transformers' normal init (embedding and linear layers)
    attn_implementation: str = "sdpa"  # "eager" also works; both are stock transformers paths

    def __post_init__(self) -> None:
        for name in ("num_layers", "width", "num_heads", "num_kv_heads", "head_dim", "mlp_width", "vocab_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"BackboneConfig.{name} must be positive, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")

    def parameter_count(self) -> dict[str, int]:
        """Exact parameter count of the Qwen3Model this config builds, by part (checked against numel in tests)."""
        d, hd = self.width, self.head_dim
        attention = d * self.num_heads * hd + 2 * d * self.num_kv_heads * hd + self.num_heads * hd * d + 2 * hd
        mlp = 3 * d * self.mlp_width
        per_layer = attention + mlp + 2 * d  # + input_layernorm, post_attention_layernorm
        return {
            "embed_tokens": self.vocab_size * d,
            "attention_per_layer": attention,  # q, k, v, o projections + q_norm, k_norm
            "mlp_per_layer": mlp,
            "layer": per_layer,
            "layers": self.num_layers * per_layer,
            "final_norm": d,
            "total": self.vocab_size * d + self.num_layers * per_layer + d,
        }


def qwen3_config(config: BackboneConfig) -> Qwen3Config:
    """The transformers config of the backbone: full attention in every layer, no sliding window, tied embedding."""
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=config.vocab_size,
        hidden_size=config.width,
        intermediate_size=config.mlp_width,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        head_dim=config.head_dim,
        max_position_embeddings=config.max_positions,
        rms_norm_eps=config.rms_norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": float(config.rope_theta)},
        attention_dropout=config.attention_dropout,
        initializer_range=config.initializer_range,
        use_sliding_window=False,
        tie_word_embeddings=True,  # there is no lm_head; a loader that builds one ties it to embed_tokens
        use_cache=False,  # training default (Gepard §2.2); inference passes a cache explicitly
        attn_implementation=config.attn_implementation,
    )


def build_qwen3(config: BackboneConfig) -> Qwen3Model:
    """A freshly initialised stock ``Qwen3Model`` (normal(0, initializer_range) weights, unit RMSNorm gains)."""
    from transformers import Qwen3Model

    return Qwen3Model(qwen3_config(config))


class PlainBackbone(nn.Module):
    """A backbone that runs itself in plain torch, without transformers (``duet.nn.qwen3.Qwen3Weights``):
    :func:`run_backbone` and :func:`new_cache` hand such a module to these two."""

    def run(self, inputs_embeds: torch.Tensor, *, cache: Any = None, position_ids: torch.Tensor | None = None,
            attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError

    def new_cache(self) -> Any:
        raise NotImplementedError


def new_cache(model: nn.Module) -> Any:
    """An empty KV cache for ``model``: transformers' DynamicCache for a stock model (grows by one entry per
    position); a :class:`PlainBackbone` makes its own."""
    if isinstance(model, PlainBackbone):
        return model.new_cache()
    from transformers.cache_utils import DynamicCache

    return DynamicCache(config=model.config)


def run_backbone(
    model: nn.Module,
    inputs_embeds: torch.Tensor,
    *,
    cache: Any = None,
    position_ids: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """inputs_embeds (B, L, D) -> last hidden states (B, L, D), after the final RMSNorm.

    Causal attention throughout. With ``cache`` the new positions attend to everything cached before them and
    the cache is extended in place (prefill, then one position per decode step); without it nothing is cached
    (``use_cache=False``, as in training). Positions default to ``cache length + arange(L)``.
    ``attention_mask`` is passed through unchanged (a 2D padding mask, or a 4D (B, 1, L, KV) mask; see DESIGN §C
    for which kinds each attention implementation reads correctly); right-padded batches need none, because with
    causal attention a real position never sees the padding after it.

    A :class:`PlainBackbone` runs itself (its ``run``: the same arguments, the same function).
    """
    if isinstance(model, PlainBackbone):
        return model.run(inputs_embeds, cache=cache, position_ids=position_ids, attention_mask=attention_mask)
    out = model(
        inputs_embeds=inputs_embeds,
        attention_mask=attention_mask,
        position_ids=position_ids,
        cache=cache,
        use_cache=cache is not None,
    )
    return out.last_hidden_state  # (B, L, D)


def run_backbone_attentions(model: nn.Module, inputs_embeds: torch.Tensor) -> tuple[torch.Tensor, tuple]:
    """Training-time causal pass that also returns every layer's attention weights, each (B, H, L, L).

    Only eager attention computes the weights: call ``model.set_attn_implementation("eager")`` first (the same
    function as sdpa, slower; checkpoints keep their configured implementation)."""
    if model.config._attn_implementation != "eager":
        raise DuetError("attention weights need eager attention: model.set_attn_implementation('eager') first")
    out = model(inputs_embeds=inputs_embeds, output_attentions=True, use_cache=False)
    return out.last_hidden_state, tuple(out.attentions)


class Backbone(nn.Module):
    """A bare container around a stock ``Qwen3Model`` registered as ``model`` (state dict ``model.*``)."""

    def __init__(self, config: BackboneConfig):
        super().__init__()
        self.config = config
        self.model = build_qwen3(config)

    @property
    def embed_tokens(self) -> nn.Embedding:
        return self.model.embed_tokens

    def new_cache(self) -> Any:
        return new_cache(self.model)

    def forward(
        self,
        inputs_embeds: torch.Tensor,
        *,
        cache: Any = None,
        position_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """inputs_embeds (B, L, D) -> hidden states (B, L, D); see :func:`run_backbone`."""
        return run_backbone(self.model, inputs_embeds, cache=cache, position_ids=position_ids,
                            attention_mask=attention_mask)
