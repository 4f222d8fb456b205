"""LoRA adapters for ``nn.Linear`` (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models").

An adapted layer computes ``y = x W^T + b + (alpha / r) * dropout(x) A^T B^T`` with A (r, in) and B (out, r): the
base weight W stays frozen and only A and B train. B starts at zero, so an adapted model is exactly its base model
until the first update; A starts as ``nn.Linear`` initialises its weight (Kaiming-uniform), as the paper and peft do.

Gepard's DPO stage (DESIGN §A, "CFG distilled by DPO"; report §1.4 item 3) trains such adapters on the stock Qwen3
backbone and folds them into the weights for export: :func:`merge_lora` replaces every adapted layer by a plain
``nn.Linear`` holding ``W + (alpha / r) B A``, so the exported state dict has exactly the base model's names and
shapes and loads into a stock ``Qwen3Model`` (and vLLM) unchanged.

Parameter names. :class:`LoRALinear` *is* an ``nn.Linear`` (a subclass) with two extra parameters, so an adapted
model's state dict keeps every base name (``...q_proj.weight``) and adds ``...q_proj.lora_A`` / ``...q_proj.lora_B``.

Shape legend: N any leading dims, I in_features, O out_features, r rank.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from duet.errors import DuetError

# Every projection of a stock Qwen3 block (duet.nn.backbone's parameter names): attention and SwiGLU MLP.
QWEN3_PROJECTIONS = ("model.layers.*.self_attn.q_proj", "model.layers.*.self_attn.k_proj",
                     "model.layers.*.self_attn.v_proj", "model.layers.*.self_attn.o_proj",
                     "model.layers.*.mlp.gate_proj", "model.layers.*.mlp.up_proj", "model.layers.*.mlp.down_proj")


@dataclass(frozen=True)
class LoRAConfig:
    rank: int = 16  # r
    alpha: float = 32.0  # the update is scaled by alpha / r
    dropout: float = 0.0  # on the adapter's input only (the base path never drops)
    targets: tuple[str, ...] = QWEN3_PROJECTIONS  # fnmatch patterns over module names (``*`` crosses dots)

    def __post_init__(self) -> None:
        if self.rank < 1 or self.alpha <= 0 or not 0.0 <= self.dropout < 1.0:
            raise DuetError(f"LoRA needs rank >= 1, alpha > 0 and dropout in [0, 1); got {self.rank}, {self.alpha}, "
                            f"{self.dropout}")
        if not self.targets:
            raise DuetError("LoRA needs at least one target module pattern")

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


class LoRALinear(nn.Linear):
    """An ``nn.Linear`` with a rank-r adapter; built from a trained layer by :meth:`adapt` (the weights shared)."""

    def __init__(self, in_features: int, out_features: int, bias: bool, config: LoRAConfig,
                 device: torch.device | None = None, dtype: torch.dtype | None = None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.rank, self.scale = config.rank, config.scale
        self.lora_A = nn.Parameter(torch.empty(config.rank, in_features, device=device, dtype=dtype))  # (r, I)
        self.lora_B = nn.Parameter(torch.zeros(out_features, config.rank, device=device, dtype=dtype))  # (O, r)
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # nn.Linear's own weight init
        self.lora_dropout = nn.Dropout(config.dropout) if config.dropout > 0 else nn.Identity()

    @classmethod
    def adapt(cls, linear: nn.Linear, config: LoRAConfig) -> "LoRALinear":
        """An adapted copy of ``linear`` that shares its weight and bias tensors (frozen here), B = 0."""
        w = linear.weight
        out = cls(linear.in_features, linear.out_features, linear.bias is not None, config, w.device, w.dtype)
        out.weight = linear.weight
        out.bias = linear.bias
        out.weight.requires_grad_(False)
        if out.bias is not None:
            out.bias.requires_grad_(False)
        return out.train(linear.training)

    def delta(self) -> torch.Tensor:
        """The weight update (O, I) the adapter adds: (alpha / r) B A."""
        return (self.lora_B.float() @ self.lora_A.float()) * self.scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        base = F.linear(x, self.weight, self.bias)  # (N, O)
        a = F.linear(self.lora_dropout(x), self.lora_A.to(x.dtype))  # (N, r)
        return base + F.linear(a, self.lora_B.to(x.dtype)) * self.scale

    def merged(self) -> nn.Linear:
        """A plain ``nn.Linear`` with W + (alpha / r) B A (and the same bias), trainable as any layer is."""
        w = self.weight
        out = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, device=w.device,
                        dtype=w.dtype)
        with torch.no_grad():
            out.weight.copy_((w.float() + self.delta()).to(w.dtype))
            if self.bias is not None:
                out.bias.copy_(self.bias)
        return out.train(self.training)


def _set_module(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


def apply_lora(model: nn.Module, config: LoRAConfig) -> list[str]:
    """Adapt every ``nn.Linear`` whose name matches a target pattern and freeze everything else; returns the names.

    Afterwards only ``lora_A`` / ``lora_B`` parameters require gradients. A pattern that matches no linear layer is
    an error (a renamed module would silently train nothing).
    """
    linears = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear) and not
               isinstance(m, LoRALinear)}
    names = []
    for pattern in config.targets:
        hits = [n for n in linears if fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            raise DuetError(f"LoRA target {pattern!r} matches no nn.Linear of the model")
        names += [n for n in hits if n not in names]
    for p in model.parameters():
        p.requires_grad_(False)
    for name in names:
        _set_module(model, name, LoRALinear.adapt(linears[name], config))
    return names


def lora_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The adapters' parameters (what an optimizer over an adapted model holds)."""
    return [p for m in model.modules() if isinstance(m, LoRALinear) for p in (m.lora_A, m.lora_B)]


def merge_lora(model: nn.Module) -> int:
    """Fold every adapter into its base weight, in place: each :class:`LoRALinear` becomes a plain ``nn.Linear``
    and every parameter trains again. Returns how many layers were merged."""
    adapted = [(name, m) for name, m in model.named_modules() if isinstance(m, LoRALinear)]
    for name, m in adapted:
        _set_module(model, name, m.merged())
    for p in model.parameters():
        p.requires_grad_(True)
    return len(adapted)
