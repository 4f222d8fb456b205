"""The backbone is a stock transformers Qwen3Model: names, counts, caching and causality."""

from __future__ import annotations

import torch
from transformers import Qwen3ForCausalLM, Qwen3Model

from duet.nn.backbone import Backbone, BackboneConfig, new_cache, qwen3_config, run_backbone

SMALL = BackboneConfig(num_layers=2, width=64, num_heads=4, num_kv_heads=2, head_dim=16, mlp_width=96, vocab_size=50,
                       rope_theta=10_000.0, max_positions=128)


def test_is_stock_qwen3_with_checkpoint_names():
    torch.manual_seed(0)
    backbone = Backbone(SMALL)
    assert type(backbone.model) is Qwen3Model  # not a subclass: no custom op can hide inside
    assert backbone.model.config._attn_implementation == "sdpa"
    names = set(backbone.state_dict())
    # Exactly Qwen3ForCausalLM's names minus lm_head: it loads with only the (tied) lm_head missing.
    lm = Qwen3ForCausalLM(qwen3_config(SMALL))
    assert names == set(lm.state_dict()) - {"lm_head.weight"}
    result = lm.load_state_dict(backbone.state_dict(), strict=False)
    assert list(result.unexpected_keys) == [] and list(result.missing_keys) == ["lm_head.weight"]
    assert torch.equal(lm.model.layers[1].mlp.down_proj.weight, backbone.model.layers[1].mlp.down_proj.weight)
    assert "model.layers.1.self_attn.q_proj.weight" in names and "model.embed_tokens.weight" in names


def test_parameter_count_matches_numel():
    counts = SMALL.parameter_count()
    model = Backbone(SMALL).model
    assert counts["total"] == sum(p.numel() for p in model.parameters())
    assert counts["embed_tokens"] == model.embed_tokens.weight.numel()
    assert counts["layer"] == sum(p.numel() for p in model.layers[0].parameters())


def test_cached_decode_equals_full_pass():
    torch.manual_seed(1)
    backbone = Backbone(SMALL).eval()
    x = torch.randn(2, 9, 64)
    with torch.no_grad():
        full = backbone(x)
        cache = backbone.new_cache()
        parts = [backbone(x[:, :5], cache=cache)]
        for i in range(5, 9):
            parts.append(backbone(x[:, i : i + 1], cache=cache))
    assert cache.get_seq_length() == 9
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-5, rtol=1e-5)


def test_causal_and_inputs_embeds_only():
    torch.manual_seed(2)
    model = Backbone(SMALL).model.eval()
    x = torch.randn(1, 8, 64)
    y = x.clone()
    y[:, 5:] = torch.randn(1, 3, 64)  # change the future
    with torch.no_grad():
        hx, hy = run_backbone(model, x), run_backbone(model, y)
        assert not torch.allclose(hx[:, 5:], hy[:, 5:])
        torch.testing.assert_close(hx[:, :5], hy[:, :5])
        # The same as transformers' own forward with inputs_embeds, nothing added around it.
        torch.testing.assert_close(hx, model(inputs_embeds=x, use_cache=False).last_hidden_state)
    assert new_cache(model).get_seq_length() == 0
