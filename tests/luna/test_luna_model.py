"""LunaModel: layout, frame embedding, bidirectional attention, exact batching, Qwen3 initialisation, save/load."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3Model

from duet.errors import DuetError
from duet.luna.config import LunaConfig
from duet.luna.model import LunaInputs, LunaModel, segment_layout


def _row(inputs: LunaInputs, b: int) -> LunaInputs:
    """Row b alone, cut to its own lengths (no padding at all)."""
    s, p, t = int(inputs.text_lengths[b]), int(inputs.prompt_lengths[b]), int(inputs.target_lengths[b])
    return LunaInputs(
        text_ids=inputs.text_ids[b : b + 1, :s],
        text_lengths=inputs.text_lengths[b : b + 1],
        target=inputs.target[b : b + 1, :t],
        target_lengths=inputs.target_lengths[b : b + 1],
        prompt=inputs.prompt[b : b + 1, :p],
        prompt_lengths=inputs.prompt_lengths[b : b + 1],
    )


def test_segment_layout_matches_loop():
    text, prompt, target = torch.tensor([3, 0, 2]), torch.tensor([1, 2, 0]), torch.tensor([2, 3, 1])
    S, P, T = 3, 2, 3
    valid, pos = segment_layout(text, prompt, target, S, P, T)
    for b in range(3):
        expect_valid, expect_pos, n = [], [], 0
        for seg_len, seg_max in ((text[b], S), (prompt[b], P), (target[b], T)):
            for i in range(seg_max):
                real = i < int(seg_len)
                expect_valid.append(real)
                if real:
                    expect_pos.append(n)
                    n += 1
        assert valid[b].tolist() == expect_valid
        assert pos[b][valid[b]].tolist() == expect_pos  # real positions numbered 0.. as if unpadded


def test_frame_embedding_is_sum_of_separate_tables_with_per_codebook_mask(make_config):
    cfg = make_config(q=3, k=5)
    model = LunaModel(cfg)
    K = cfg.codebook_size
    grid = torch.tensor([[[0, 5, 4], [5, 5, 5], [2, 1, 0]]])  # 5 = mask id
    got = model.embed_grid(grid)
    tables = model.audio_embed.weight.view(3, K + 1, -1)  # (Q, K + 1, D): table q, row K is q's mask embedding
    for t in range(3):
        naive = sum(tables[q, int(grid[0, t, q])] for q in range(3))
        torch.testing.assert_close(got[0, t], naive)
    # the mask embeddings differ per codebook
    assert not torch.equal(tables[0, K], tables[1, K])


def test_logits_shape_and_bidirectional_attention(make_config, random_inputs):
    cfg = make_config()
    model = LunaModel(cfg).eval()
    inputs = random_inputs(cfg)
    with torch.no_grad():
        base = model(inputs)
        assert base.shape == (2, 7, 2, 16)
        # a change in the LAST target frame changes the FIRST frame's logits: no causal mask
        target = inputs.target.clone()
        target[0, 6] = (target[0, 6] + 1) % 16
        later = model(replace(inputs, target=target))
        assert not torch.allclose(base[0, 0], later[0, 0])
        # the text conditions the target; with text length 0 the text ids no longer matter
        other_text = replace(inputs, text_ids=(inputs.text_ids + 1) % cfg.backbone.vocab_size)
        assert not torch.allclose(model(other_text)[0], base[0])
        no_text = replace(inputs, text_lengths=torch.zeros(2, dtype=torch.long))
        torch.testing.assert_close(model(no_text), model(replace(other_text, text_lengths=no_text.text_lengths)))


def test_row_logits_identical_batched_or_alone(make_config, random_inputs):
    cfg = make_config()
    model = LunaModel(cfg).eval()
    inputs = random_inputs(cfg, text=(5, 2), prompt=(3, 1), target=(7, 4))
    with torch.no_grad():
        batched = model(inputs)
        for b in range(2):
            alone = model(_row(inputs, b))
            t = int(inputs.target_lengths[b])
            torch.testing.assert_close(batched[b, :t], alone[0], rtol=1e-5, atol=1e-5)


def test_padding_contents_do_not_matter(make_config, random_inputs):
    cfg = make_config()
    model = LunaModel(cfg).eval()
    inputs = random_inputs(cfg, text=(5, 2), prompt=(3, 1), target=(7, 4))
    junk = replace(
        inputs,
        text_ids=inputs.text_ids.clone().index_fill_(1, torch.tensor([3, 4]), 7),
        prompt=inputs.prompt.clone().index_fill_(1, torch.tensor([1, 2]), 3),
        target=inputs.target.clone().index_fill_(1, torch.tensor([5, 6]), 0),
    )
    junk.text_ids[0] = inputs.text_ids[0]
    junk.prompt[0] = inputs.prompt[0]
    junk.target[0] = inputs.target[0]
    with torch.no_grad():
        torch.testing.assert_close(model(inputs)[1, :4], model(junk)[1, :4])


def test_eager_and_sdpa_agree(make_config, random_inputs):
    torch.manual_seed(0)
    sdpa = LunaModel(make_config()).eval()
    eager = LunaModel(make_config(attn="eager")).eval()
    eager.load_state_dict(sdpa.state_dict())
    inputs = random_inputs(sdpa.config)
    with torch.no_grad():
        a, b = sdpa(inputs), eager(inputs)
    for row in range(2):
        t = int(inputs.target_lengths[row])
        torch.testing.assert_close(a[row, :t], b[row, :t], rtol=1e-5, atol=1e-5)


def test_bad_grids_are_refused(make_config, random_inputs):
    cfg = make_config()
    model = LunaModel(cfg)
    inputs = random_inputs(cfg)
    dirty_prompt = inputs.prompt.clone()
    dirty_prompt[0, 0, 0] = cfg.mask_id
    with pytest.raises(DuetError, match="prompt grid must be clean"):
        model(replace(inputs, prompt=dirty_prompt))
    bad = inputs.target.clone()
    bad[0, 0, 0] = cfg.mask_id + 1
    with pytest.raises(DuetError, match="grid codes must lie"):
        model(replace(inputs, target=bad))
    with pytest.raises(DuetError, match="at least one frame"):
        model(replace(inputs, target_lengths=torch.tensor([7, 0])))


def _tiny_qwen3(vocab: int) -> Qwen3Config:
    return Qwen3Config(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )


@pytest.mark.parametrize("cls", [Qwen3ForCausalLM, Qwen3Model])
def test_init_from_local_qwen3_checkpoint(tmp_path, make_config, cls):
    torch.manual_seed(1)
    qwen = cls(_tiny_qwen3(vocab=30))
    qwen.save_pretrained(tmp_path)
    model = LunaModel(make_config(vocab=40))  # 10 extra rows: service tokens past the checkpoint's vocabulary
    before = {k: v.clone() for k, v in model.state_dict().items()}
    copied = model.init_from(tmp_path)
    src = qwen.model if cls is Qwen3ForCausalLM else qwen
    ref = src.state_dict()
    own = model.model.state_dict()
    assert set(copied) == set(own)
    for name, tensor in own.items():
        if name == "embed_tokens.weight":
            torch.testing.assert_close(tensor[:30], ref[name], rtol=0, atol=0)
            torch.testing.assert_close(tensor[30:], before["model." + name][30:], rtol=0, atol=0)
        else:
            torch.testing.assert_close(tensor, ref[name], rtol=0, atol=0)
    # audio tables and heads are new, re-initialised at the text embedding's scale
    emb = model.audio_embed.weight.view(2, 17, -1).sum(0)  # one frame = sum of Q lookups
    text_std = float(ref["embed_tokens.weight"].std())
    assert 0.5 < float(emb.detach().std()) / text_std < 2.0


def test_init_from_refuses_mismatched_checkpoints(tmp_path, make_config):
    Qwen3ForCausalLM(_tiny_qwen3(vocab=30)).save_pretrained(tmp_path / "ok")
    with pytest.raises(DuetError, match="does not fit"):
        LunaModel(make_config(vocab=20)).init_from(tmp_path / "ok")
    with pytest.raises(DuetError, match="hidden_size"):
        LunaModel(make_config(vocab=40, width=48)).init_from(tmp_path / "ok")
    with pytest.raises(DuetError, match="no config.json"):
        LunaModel(make_config()).init_from(tmp_path)


def test_save_and_load_round_trip(tmp_path, make_config, random_inputs):
    model = LunaModel(make_config()).eval()
    model.save(tmp_path / "ckpt")
    again = LunaModel.load(tmp_path / "ckpt").eval()
    assert again.config == model.config
    inputs = random_inputs(model.config)
    with torch.no_grad():
        torch.testing.assert_close(model(inputs), again(inputs), rtol=0, atol=0)
    with pytest.raises(DuetError, match="not a duet checkpoint"):
        LunaModel.load(tmp_path)


def test_tied_heads_read_the_code_tables(tmp_path, make_config, random_inputs):
    cfg = replace(make_config(q=3, k=8), tie_heads=True)
    Q, K, D = cfg.num_codebooks, cfg.codebook_size, cfg.backbone.width
    tied, untied = LunaModel(cfg), LunaModel(replace(cfg, tie_heads=False))
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert n(untied) - n(tied) == Q * K * D  # the head weights are gone; the bias stays
    assert "audio_heads.weight" not in tied.state_dict() and "audio_head_bias" in tied.state_dict()
    with torch.no_grad():
        tied.audio_head_bias.normal_()
    h = torch.randn(2, 5, D)
    logits = tied.code_logits(h)  # (B, n, Q, K)
    for q in range(Q):  # head q: codebook q's rows 0..K-1 of its table (its mask row K has no logit)
        table = tied.audio_embed.weight[q * (K + 1) : q * (K + 1) + K]  # (K, D)
        torch.testing.assert_close(logits[:, :, q], h @ table.T + tied.audio_head_bias[q * K : (q + 1) * K])
    inputs = random_inputs(cfg)
    tied(inputs).sum().backward()  # the tables learn from both ends
    mask_rows = tied.audio_embed.weight.grad.view(Q, K + 1, D)[:, K]
    assert tied.audio_embed.weight.grad.abs().sum() > 0 and mask_rows.abs().sum() > 0
    tied.save(tmp_path / "tied")
    again = LunaModel.load(tmp_path / "tied").eval()
    assert again.config.tie_heads
    with torch.no_grad():
        torch.testing.assert_close(tied.eval()(inputs), again(inputs), rtol=0, atol=0)


def test_logits_fn_rows_and_null_text(make_config, random_inputs):
    cfg = make_config()
    model = LunaModel(cfg).eval()
    inputs = random_inputs(cfg)
    fn = model.logits_fn(inputs)
    doubled = torch.cat([inputs.target, inputs.target])
    out = fn(doubled, torch.tensor([True, True, False, False]))
    with torch.no_grad():
        torch.testing.assert_close(out[:2], model(inputs))
        null = model(replace(inputs, text_lengths=torch.zeros(2, dtype=torch.long)))
    torch.testing.assert_close(out[2:], null)
    assert isinstance(model.config, LunaConfig)


def test_collate_pads_each_segment_and_round_trips(make_config):
    from duet.luna.model import collate

    cfg = make_config()
    texts = [torch.tensor([1, 2, 3]), torch.tensor([4])]
    grids = [torch.randint(0, 16, (5, 2)), torch.randint(0, 16, (2, 2))]
    prompts = [torch.randint(0, 16, (0, 2)), torch.randint(0, 16, (3, 2))]
    batch = collate(texts, grids, text_pad_id=0, mask_id=cfg.mask_id, prompts=prompts)
    assert batch.text_lengths.tolist() == [3, 1] and batch.target_lengths.tolist() == [5, 2]
    assert batch.prompt_lengths.tolist() == [0, 3]
    for b in range(2):
        assert torch.equal(batch.text_ids[b, : len(texts[b])], texts[b])
        assert torch.equal(batch.target[b, : len(grids[b])], grids[b])
        assert (batch.target[b, len(grids[b]) :] == cfg.mask_id).all()
    with torch.no_grad():
        LunaModel(cfg).eval()(batch)  # a row with an empty prompt next to one with a prompt runs
    with pytest.raises(DuetError, match="one text and one grid"):
        collate(texts, grids[:1], 0, cfg.mask_id)
