"""LoRA adapters (duet.nn.lora) on Gepard's Qwen3 backbone: zero-init identity, adapted forward vs the formula,
merge equals the adapted forward, only adapters train, merged state dict is the stock one."""

from __future__ import annotations

import pytest
import torch
from gepard_train_testing import small_config
from torch import nn

from duet.errors import DuetError
from duet.gepard.model import GepardModel, GepardPrompt
from duet.nn.lora import QWEN3_PROJECTIONS, LoRAConfig, LoRALinear, apply_lora, lora_parameters, merge_lora


def _model(seed: int = 0) -> GepardModel:
    torch.manual_seed(seed)
    return GepardModel(small_config()).eval()


def _logits(model: GepardModel) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    frames = torch.randint(0, 6, (2, 5, 32))
    out = model.logits(text_ids=torch.tensor([[1, 5, 9, 2, 3], [1, 7, 7, 2, 3]]), frames=frames)
    return out.codes, out.stop


def _randomise_adapters(model: nn.Module) -> None:
    torch.manual_seed(2)
    with torch.no_grad():
        for p in lora_parameters(model):
            p.normal_(0, 0.05)


def test_a_linear_adapter_is_the_formula():
    torch.manual_seed(0)
    base = nn.Linear(6, 4)
    cfg = LoRAConfig(rank=3, alpha=6.0)
    lora = LoRALinear.adapt(base, cfg)
    assert lora.weight is base.weight and not lora.weight.requires_grad
    x = torch.randn(2, 7, 6)
    torch.testing.assert_close(lora(x), base(x), rtol=0, atol=0)  # B = 0 at the start
    with torch.no_grad():
        lora.lora_B.normal_()
    want = x @ base.weight.T + base.bias + cfg.alpha / cfg.rank * (x @ lora.lora_A.T @ lora.lora_B.T)
    torch.testing.assert_close(lora(x), want)
    merged = lora.merged()
    assert type(merged) is nn.Linear
    torch.testing.assert_close(merged(x), want, rtol=1e-5, atol=1e-6)


def test_wrapping_the_backbone_projections_starts_at_the_base_model():
    model = _model()
    before = _logits(model)
    names = apply_lora(model, LoRAConfig(rank=4))
    layers = model.config.backbone.num_layers
    assert len(names) == 7 * layers
    assert all(isinstance(model.get_submodule(n), LoRALinear) for n in names)
    after = _logits(model)
    for a, b in zip(before, after):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)  # adds an exact zero (float sums may regroup)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {f"{n}.{ab}" for n in names for ab in ("lora_A", "lora_B")}
    assert not isinstance(model.heads.codes, LoRALinear)  # only what the patterns name


def test_merge_equals_the_adapted_forward_and_restores_stock_names():
    model = _model()
    stock = model.state_dict()
    apply_lora(model, LoRAConfig(rank=4, alpha=8.0, dropout=0.1))
    _randomise_adapters(model)
    model.eval()  # adapter dropout off: the forward a merge must reproduce
    adapted = _logits(model)
    assert not torch.allclose(adapted[0], _logits(_model())[0])  # the adapters do change the model
    assert merge_lora(model) == 7 * model.config.backbone.num_layers
    assert not any(isinstance(m, LoRALinear) for m in model.modules())
    merged = model.state_dict()
    assert merged.keys() == stock.keys() and all(merged[k].shape == stock[k].shape for k in stock)
    for a, b in zip(adapted, _logits(model)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    fresh = GepardModel(small_config()).eval()  # loads into a plain model: the export is a stock checkpoint
    fresh.load_state_dict(merged, strict=True)
    torch.testing.assert_close(_logits(fresh)[0], adapted[0], rtol=1e-4, atol=1e-5)
    logits, _ = fresh.prefill(GepardPrompt(torch.tensor([[1, 2, 3]])))
    assert torch.isfinite(logits.codes).all()


def test_only_adapters_get_gradients():
    model = _model()
    apply_lora(model, LoRAConfig(rank=2))
    model.train()
    codes, stop = _logits(model)
    (codes.sum() + stop.sum()).backward()
    for name, p in model.named_parameters():
        if "lora_" in name:
            assert p.grad is not None
        else:
            assert p.grad is None, name
    # B = 0 at the start: A's gradient is zero, B's is not (the usual LoRA start)
    assert any(p.grad.abs().sum() > 0 for n, p in model.named_parameters() if n.endswith("lora_B"))


def test_a_pattern_that_matches_nothing_is_an_error():
    with pytest.raises(DuetError, match="matches no nn.Linear"):
        apply_lora(_model(), LoRAConfig(targets=("model.layers.*.self_attn.qkv_proj",)))
    with pytest.raises(DuetError):
        LoRAConfig(rank=0)
    assert "model.layers.*.mlp.down_proj" in QWEN3_PROJECTIONS
