"""The voice compressor wired into Gepard (§2.6): where the K prefix vectors sit, null-prefix rows and their dropout,
the loss terms against naive loops, the 0.1x learning rate, a few training steps, config and checkpoint round trips
(old ones without a compressor included), the report's parameter count, and the aligned-input path with a prefix."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from gepard_testing import micro_config, random_codes, wrapped

from duet.gepard.checkpoint import load_gepard
from duet.gepard.config import (
    REPORT_TOTAL_WITH_VC_PARAMS,
    GepardConfig,
    gepard_500m,
    parameter_breakdown,
    report_reconstruction,
    with_aligned_input,
    with_voice_prefix,
)
from duet.gepard.model import GepardBatch, GepardModel, GepardPrompt, collate
from duet.gepard.qformer import qformer_parameters
from duet.gepard.voice import collate_references
from duet.train.loop import param_groups
from duet.train.objectives.gepard import GepardPretrain

K = 8


def voice_micro(aligned: bool = False) -> GepardConfig:
    config = micro_config()
    if aligned:
        config = with_aligned_input(config, window=1, duration_layers=1)
    return with_voice_prefix(config, max_reference_frames=32)


def build(config: GepardConfig, seed: int = 0) -> GepardModel:
    torch.manual_seed(seed)
    return GepardModel(config)


def voice_batch(config: GepardConfig, texts: list[list[int]], frames: list[int], ref_frames: list[int],
                speakers: list[int], no_speaker: list[bool], seed: int = 1) -> GepardBatch:
    """Rows of wrapped ``texts`` with ``frames`` random frames; row b's reference has ``ref_frames[b]`` frames (0:
    none)."""
    g = torch.Generator().manual_seed(seed)
    batch = collate([(wrapped(t), random_codes(config, n, g)) for t, n in zip(texts, frames)], pad_id=0)
    refs = [random_codes(config, n, g) if n else None for n in ref_frames]
    codes, mask = collate_references(refs, config.num_channels)
    return replace(batch, reference=codes, reference_mask=mask, speaker_ids=torch.tensor(speakers),
                   no_speaker=torch.tensor(no_speaker))


def backbone_inputs(model: GepardModel) -> list[torch.Tensor]:
    """Every inputs_embeds (B, L, D) the backbone receives from now on."""
    seen: list[torch.Tensor] = []
    model.model.register_forward_pre_hook(lambda _m, _a, kw: seen.append(kw["inputs_embeds"].detach()),
                                          with_kwargs=True)
    return seen


# ---- placement --------------------------------------------------------------------------------------------------


def test_the_prefix_sits_before_each_rows_text_and_its_frames():
    config = voice_micro()
    model = build(config).eval()
    batch = voice_batch(config, [[5, 6, 7, 8, 9], [10, 11]], [4, 6], [7, 0], [0, -1], [False, True])
    seen = backbone_inputs(model)
    with torch.no_grad():
        model.audio_logits(batch)
        own = model.qformer.encode(batch.reference[:1, :, :7], torch.ones(1, 7, dtype=torch.bool))[0][0]  # unpadded
        text = model.embed_tokens(batch.text_ids)
        audio = model.audio_interface(batch.codes.transpose(1, 2))
    x = seen[-1]
    s, t = batch.text_ids.shape[1], batch.codes.shape[2]
    assert x.shape == (2, K + s + t, config.width)
    torch.testing.assert_close(x[0, :K], own)  # row 0: its own reference, padding ignored
    torch.testing.assert_close(x[1, :K], model.qformer.null_prefix.detach())  # row 1: no reference
    for b in range(2):
        sb, tb = int(batch.text_lengths[b]), int(batch.audio_lengths[b])
        torch.testing.assert_close(x[b, K: K + sb], text[b, :sb])
        torch.testing.assert_close(x[b, K + sb: K + sb + tb], audio[b, :tb])
        assert torch.count_nonzero(x[b, K + sb + tb:]) == 0  # right padding


@pytest.mark.parametrize("aligned", [False, True])
def test_teacher_forcing_equals_prefill_then_steps_and_the_prefix_is_prefill_only(aligned):
    """Training (whole sequence with the prefix) and inference (prefill [prefix | text], then one frame per step)
    give the same logits; the cache holds K + S positions after prefill and grows by one per frame."""
    config = voice_micro(aligned)
    model = build(config).eval()
    g = torch.Generator().manual_seed(3)
    text, codes, ref = wrapped([5, 6, 7, 8]), random_codes(config, 6, g), random_codes(config, 9, g)
    durations = [[1.2, 1.5, 0.7, 2.0, 0.9, 0.7, 0.0]] if aligned else None
    batch = collate([(text, codes)], pad_id=0, durations=durations)
    batch = replace(batch, reference=ref[None], reference_mask=torch.ones(1, 9, dtype=torch.bool),
                    speaker_ids=torch.tensor([0]), no_speaker=torch.tensor([False]))
    with torch.no_grad():
        full = model.audio_logits(batch)
        prefix = model.voice_prefix(ref[None])  # (1, K, D)
        prompt = GepardPrompt(torch.tensor([text]), prefix=prefix,
                              durations=torch.tensor(durations) if aligned else None)
        logits, state = model.prefill(prompt)
        cache = state.cache if aligned else state
        assert cache.get_seq_length() == K + len(text)
        steps = [logits]
        for t in range(codes.shape[1]):
            out, state = model.step(codes[:, t][None], state)
            steps.append(out)
        assert cache.get_seq_length() == K + len(text) + codes.shape[1]
    torch.testing.assert_close(torch.cat([s.codes for s in steps], dim=1), full.codes, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.cat([s.stop for s in steps], dim=1), full.stop, rtol=1e-4, atol=1e-4)


def test_a_batch_may_bring_its_own_prefix_computed_once():
    """A prefix given with the batch (e.g. one clip's, computed once for many rows) is read as is: the same logits
    as the compressor running on that clip in every row; the compressor does not run, so its terms log zero."""
    config = voice_micro()
    model = build(config).eval()
    batch = voice_batch(config, [[5, 6, 7], [8, 9]], [4, 5], [6, 6], [0, 0], [False, False])
    batch = replace(batch, reference=batch.reference[:1].expand(2, -1, -1))  # one clip for both rows
    with torch.no_grad():
        prefix = model.voice_prefix(batch.reference[:1]).expand(2, -1, -1)  # (2, K, D)
        given = replace(batch, prefix=prefix, reference=None, reference_mask=None, speaker_ids=None, no_speaker=None)
        torch.testing.assert_close(model.audio_logits(given).codes, model.audio_logits(batch).codes)
        out = model(given)
    assert out["div"].item() == out["supcon"].item() == 0.0


def test_a_prompt_without_prefix_reads_the_null_prefix():
    model = build(voice_micro()).eval()
    text = torch.tensor([wrapped([5, 6])])
    with torch.no_grad():
        implicit, _ = model.prefill(GepardPrompt(text))
        explicit, _ = model.prefill(GepardPrompt(text, prefix=model.qformer.null_prefix[None]))
    torch.testing.assert_close(implicit.codes, explicit.codes)
    assert model.with_prefix(GepardPrompt(text)).prefix.shape == (1, K, 64)


# ---- null prefix ------------------------------------------------------------------------------------------------


def test_null_sentinel_rows_always_and_other_rows_at_the_dropout_rate():
    config = voice_micro()
    model = build(config)
    b, flagged = 240, 40
    batch = voice_batch(config, [[5]] * b, [1] * b, [3] * b, [i % 7 for i in range(b)],
                        [i < flagged for i in range(b)])
    seen = backbone_inputs(model)
    null = model.qformer.null_prefix.detach()

    def null_rows() -> torch.Tensor:
        return (seen[-1][:, :K] == null).all(dim=2).all(dim=1)  # (B,)

    with torch.no_grad():
        model.eval()
        model(batch)
        assert null_rows().tolist() == [i < flagged for i in range(b)]  # inference: no dropout
        model.train()
        torch.manual_seed(5)
        model(batch)
    rows = null_rows()
    assert rows[:flagged].all()
    n, p = b - flagged, config.voice.cfg_dropout_prob
    dropped = int(rows[flagged:].sum())
    assert abs(dropped - n * p) < 4 * math.sqrt(n * p * (1 - p)), dropped  # Bernoulli(0.15) per row


# ---- loss terms ---------------------------------------------------------------------------------------------------


def naive_div(q: torch.Tensor) -> float:
    total = 0.0
    for row in q:
        pairs = [float(torch.cosine_similarity(row[i], row[j], dim=0)) ** 2
                 for i in range(len(row)) for j in range(len(row)) if i != j]
        total += sum(pairs) / len(pairs)
    return total / len(q)


def naive_supcon(q: torch.Tensor, speakers: list[int], valid: list[bool], tau: float = 0.1) -> float:
    z = [torch.nn.functional.normalize(row.mean(0), dim=0) for row in q]
    losses = []
    for i in range(len(z)):
        if not valid[i]:
            continue
        others = [a for a in range(len(z)) if a != i and valid[a]]
        positives = [p for p in others if speakers[p] == speakers[i]]
        if not positives:
            continue
        denominator = sum(math.exp(float(z[i] @ z[a]) / tau) for a in others)
        losses.append(-sum(math.log(math.exp(float(z[i] @ z[p]) / tau) / denominator) for p in positives)
                      / len(positives))
    return sum(losses) / len(losses) if losses else 0.0


def test_loss_adds_div_and_supcon_over_the_rows_that_have_a_reference():
    """Rows 0-3: two speakers with references; row 4 has a reference but is flagged (in L_div, not in L_supcon);
    row 5 has none (in neither). Speaker 9 of rows 4 and 5 would pair them if they counted."""
    config = voice_micro()
    model = build(config).train()
    batch = voice_batch(config, [[5, 6], [7], [8, 9, 10], [11], [12], [13, 14]], [3, 4, 5, 2, 3, 4],
                        [5, 6, 4, 7, 5, 0], [0, 0, 1, 1, 9, 9], [False, False, False, False, True, True])
    torch.manual_seed(0)
    out = model(batch)
    for key in ("div", "supcon", "ce", "stop_bce"):
        assert torch.isfinite(out[key]), key
    torch.testing.assert_close(out["loss"].detach(), out["ce"] + config.stop_loss_weight * out["stop_bce"]
                               + out["div"] + out["supcon"])
    with torch.no_grad():
        q = model.qformer.encode(batch.reference, batch.reference_mask)[1]  # (B, K, D)
    assert out["div"].item() == pytest.approx(naive_div(q[:5]), rel=1e-4)
    expected = naive_supcon(q, [0, 0, 1, 1, 9, 9], [True] * 4 + [False, False])
    assert expected > 0 and out["supcon"].item() == pytest.approx(expected, rel=1e-4)
    out["loss"].backward()
    assert model.qformer.queries.grad is not None and torch.isfinite(model.qformer.queries.grad).all()


def test_supcon_weight_scales_only_the_supcon_term():
    """The same batch and dropout draw under weights 1 and 0.25: the losses differ by 0.75 L_supcon, nothing else."""
    config = voice_micro()
    model = build(config).train()
    batch = voice_batch(config, [[5, 6], [7], [8, 9, 10], [11]], [3, 4, 5, 2], [5, 6, 4, 7], [0, 0, 1, 1],
                        [False] * 4)
    torch.manual_seed(0)
    full = model(batch)
    model.qformer.config = replace(model.qformer.config, supcon_weight=0.25)
    torch.manual_seed(0)
    scaled = model(batch)
    assert full["supcon"].item() > 0 and scaled["supcon"].item() == pytest.approx(full["supcon"].item())
    torch.testing.assert_close(full["loss"] - scaled["loss"], 0.75 * full["supcon"])
    with pytest.raises(ValueError, match="supcon_weight"):
        replace(model.qformer.config, supcon_weight=-1.0)


def test_a_batch_without_references_reads_null_prefix_and_logs_zero_terms():
    config = voice_micro()
    model = build(config).train()
    g = torch.Generator().manual_seed(0)
    out = model(collate([(wrapped([5, 6]), random_codes(config, 3, g))], pad_id=0))
    assert out["div"].item() == 0.0 and out["supcon"].item() == 0.0 and torch.isfinite(out["loss"])


def test_the_compressor_and_null_prefix_train_at_a_tenth_of_the_lr():
    config = voice_micro()
    model = build(config)
    objective = GepardPretrain(voice=config.voice)
    assert objective.lr_multipliers()["qformer."] == 0.1
    groups = param_groups(model, 0.1, objective.lr_multipliers())
    slow = [p for g in groups if g["lr_mult"] == 0.1 for p in g["params"]]
    assert sum(p.numel() for p in slow) == qformer_parameters(config.voice)
    assert any(p is model.qformer.null_prefix for p in slow)
    assert "qformer." not in GepardPretrain().lr_multipliers()


def test_a_few_training_steps_reduce_the_loss():
    config = voice_micro()
    model = build(config).train()
    batch = voice_batch(config, [[5, 6, 7], [8, 9], [10, 11, 12], [13]], [8, 6, 7, 5], [6, 5, 7, 4],
                        [0, 0, 1, 1], [False] * 4)
    objective = GepardPretrain(voice=config.voice)
    groups = param_groups(model, 0.0, objective.lr_multipliers())
    for group in groups:
        group["lr"] = 3e-3 * group["lr_mult"]
    optimiser = torch.optim.AdamW(groups)
    torch.manual_seed(0)
    losses = []
    for _ in range(40):
        loss, logged = objective.loss(model, batch)
        assert torch.isfinite(logged["div"]) and torch.isfinite(logged["supcon"])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5, (losses[:5], losses[-5:])


# ---- config, checkpoints, parameter count -------------------------------------------------------------------------


def test_config_round_trips_and_an_old_config_without_voice_loads():
    config = voice_micro(aligned=True)
    assert GepardConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    old = micro_config().to_dict()
    del old["voice"]  # a config.json written before the compressor existed
    assert GepardConfig.from_dict(old).voice is None and GepardConfig.from_dict(old) == micro_config()
    with pytest.raises(ValueError, match="as wide as the model"):
        replace(micro_config(), voice=replace(config.voice, width=32, num_heads=4))


def test_checkpoints_with_and_without_the_compressor_load(tmp_path):
    from checkpoint_testing import write_tiny_gepard

    model = load_gepard(write_tiny_gepard(tmp_path / "voice", voice=True)).model
    assert model.has_voice and model.config.voice.max_reference_frames == 256
    qformer = {n for n in model.state_dict() if n.startswith("qformer.")}
    assert "qformer.null_prefix" in qformer and "qformer.output_scale" in qformer
    assert sum(p.numel() for n, p in model.named_parameters() if n in qformer) == qformer_parameters(model.config.voice)

    old_dir = write_tiny_gepard(tmp_path / "old")
    meta = json.loads((old_dir / "config.json").read_text())
    del meta["config"]["voice"]  # written before the compressor existed
    (old_dir / "config.json").write_text(json.dumps(meta))
    old = load_gepard(old_dir).model
    assert not old.has_voice and not any(name.startswith("qformer.") for name in old.state_dict())


def test_500m_with_the_compressor_against_the_reports_555_7m():
    """gepard-500m + the report-shaped Q-Former = 543,094,746; the report prints 555.7M. The 12.6M between them is
    the backbone (ours 498.8M: Qwen3's block without the attention output gate and its 151,936-row embedding, the
    MLP widened to 6272; our reading of the report's: 511.2M) plus 0.2M our reading does not find."""
    config = with_voice_prefix(gepard_500m())
    counts = parameter_breakdown(config)
    with torch.device("meta"):
        model = GepardModel(config)
    assert counts["voice_compressor"] == 42_000_385 == sum(p.numel() for p in model.qformer.parameters())
    assert counts["total"] == sum(p.numel() for p in model.parameters()) == 543_094_746
    recon = report_reconstruction()
    backbone_gap = recon["backbone"] - counts["backbone"]
    unexplained = REPORT_TOTAL_WITH_VC_PARAMS - recon["total"]
    assert backbone_gap == 12_451_840
    assert REPORT_TOTAL_WITH_VC_PARAMS - counts["total"] == backbone_gap + unexplained
    assert 0 < unexplained < 0.25e6
