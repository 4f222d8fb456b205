"""duet.nn.qwen3 against the stock transformers Qwen3Model it mirrors: the same names, and the same bits for a prompt,
for decode steps one position at a time, and for a bidirectional masked pass (a duration predictor's)."""

from __future__ import annotations

import pytest
import torch

from duet.nn.backbone import BackboneConfig, build_qwen3, new_cache, run_backbone
from duet.nn.masks import additive, bidirectional_mask, lengths_to_mask
from duet.nn.qwen3 import GrowingCache, Qwen3Step, Qwen3Weights, Uncached

SMALL = BackboneConfig(num_layers=2, width=64, num_heads=4, num_kv_heads=2, head_dim=16, mlp_width=96, vocab_size=50,
                       rope_theta=10_000.0, max_positions=128)


def pair(seed: int = 0) -> tuple[torch.nn.Module, Qwen3Weights]:
    """A stock Qwen3Model with random weights (norm gains too) and a Qwen3Weights loaded from it."""
    torch.manual_seed(seed)
    stock = build_qwen3(SMALL).eval()
    with torch.no_grad():
        for name, p in stock.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    plain = Qwen3Weights(SMALL)
    plain.load_state_dict(stock.state_dict(), strict=True)
    return stock, plain


def test_the_plain_module_has_the_stock_names_and_shapes():
    stock, plain = pair()
    assert isinstance(plain, Qwen3Weights)
    assert {k: v.shape for k, v in plain.state_dict().items()} == {k: v.shape for k, v in stock.state_dict().items()}


def test_a_prompt_then_decode_steps_give_the_stock_bits():
    stock, plain = pair(1)
    x = torch.randn(1, 11, SMALL.width)
    with torch.no_grad():
        cache_s, cache_p = new_cache(stock), new_cache(plain)
        assert isinstance(cache_p, GrowingCache)
        assert torch.equal(run_backbone(stock, x[:, :7], cache=cache_s), run_backbone(plain, x[:, :7], cache=cache_p))
        for t in range(7, 11):
            a = run_backbone(stock, x[:, t : t + 1], cache=cache_s)
            b = run_backbone(plain, x[:, t : t + 1], cache=cache_p)
            assert torch.equal(a, b), f"step {t}"
    assert cache_p.get_seq_length() == 11


def test_a_stock_model_runs_through_the_plain_step_with_the_same_bits():
    stock, _ = pair(2)
    x = torch.randn(2, 6, SMALL.width)
    with torch.no_grad():
        expected = run_backbone(stock, x)
        got = Qwen3Step(stock)(x, torch.arange(6).expand(2, 6), Uncached())
    assert torch.equal(got, expected)


def test_a_bidirectional_masked_pass_gives_the_stock_bits():
    """What the duration predictor runs: an additive mask over a right-padded batch, explicit positions."""
    stock, plain = pair(3)
    stock.config.is_causal = False
    lengths = torch.tensor([9, 5])
    valid = lengths_to_mask(lengths, 9)
    x = torch.randn(2, 9, SMALL.width)
    mask = additive(bidirectional_mask(valid), x.dtype)  # (B, 1, S, S)
    positions = torch.arange(9).expand(2, 9)
    with torch.no_grad():
        a = run_backbone(stock, x, attention_mask=mask, position_ids=positions)
        b = run_backbone(plain, x, attention_mask=mask, position_ids=positions)
    assert torch.equal(a[valid], b[valid])


def test_the_fused_weights_follow_a_load_and_a_move():
    _, plain = pair(4)
    first = plain.step()
    assert plain.step() is first  # built once
    other, _ = pair(5)
    plain.load_state_dict(other.state_dict())
    assert plain.step() is not first
    torch.testing.assert_close(plain.step().layers[0].down, other.layers[0].mlp.down_proj.weight)
    second = plain.step()
    plain.float()
    assert plain.step() is not second


def test_a_cache_and_a_mask_together_are_refused():
    _, plain = pair()
    with pytest.raises(Exception, match="cache or a mask"):
        run_backbone(plain, torch.randn(1, 2, SMALL.width), cache=GrowingCache(), attention_mask=torch.zeros(1, 1, 2, 2))
