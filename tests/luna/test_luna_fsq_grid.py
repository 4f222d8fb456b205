"""Luna on the FSQ channel grid: the grid's cells are the digits of duet-fsq's packed groups (against a by-hand
mixed-radix expansion), codes a cell cannot take get no probability, decoding changes masked cells only and stays
inside each cell's levels, CFG batched equals two passes, the data layer reads FSQ shards as the grid with durations
that add up to its frames, the MaskGIT objective equals a naive computation, training on FSQ shards exports a model
of that grid, and a tiny FSQ Luna speaks through duet.load (whole-utterance and block-streaming), clones by
infilling after a prompt and edits a span, its codes always folded back into the codec's layout."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from luna_train_testing import micro_backbone, micro_configs
from test_luna_train_recipe import DATA

import duet
from checkpoint_testing import write_tiny_luna, write_tiny_luna_realtime
from corpus_testing import HashCodec, write_corpus
from duet.data.shards import CodeShards
from duet.data.utterances import train_tokenizer
from duet.errors import DuetError
from duet.luna.config import LunaConfig, luna_preset
from duet.luna.data import LunaData
from duet.luna.decode import DecodeConfig, maskgit_decode
from duet.luna.diffusion import DiffusionConfig, masked_diffusion_loss, sample_noise_level
from duet.luna.grid import check_codec, codes_from_grid, grid_from_codes
from duet.luna.model import LunaInputs, LunaModel
from duet.luna.shipped import load_luna
from duet.text import get_tokenizer
from duet.train.loop import LoopConfig
from duet.train.metrics import read_metrics
from duet.train.recipes.luna import LunaTrainConfig, export_luna, train_luna
from duet.tts.luna_edit import CROSSFADE_SECONDS

LEVELS = (8, 7, 6, 6)


def fsq_config(groups: int = 2, **backbone) -> LunaConfig:
    return LunaConfig(backbone=micro_backbone(**backbone), num_codebooks=4 * groups, codebook_size=8,
                      fsq_levels=LEVELS)


def digits_by_hand(code: int) -> list[int]:
    """A packed group index -> its digits, first least significant, by repeated division."""
    out = []
    for level in LEVELS:
        out.append(code % level)
        code //= level
    return out


def test_the_grid_is_the_digits_of_the_packed_groups_and_folds_back():
    cfg = fsq_config(groups=8)
    assert cfg.cell_levels == LEVELS * 8 and cfg.codec_codebook_sizes == (2016,) * 8
    codes = torch.randint(0, 2016, (8, 11), generator=torch.Generator().manual_seed(0))  # (G, T)
    grid = grid_from_codes(cfg, codes)  # (T, Q)
    assert grid.shape == (11, 32)
    for t in range(11):
        for g in range(8):
            assert grid[t, 4 * g: 4 * g + 4].tolist() == digits_by_hand(int(codes[g, t]))
    assert torch.equal(codes_from_grid(cfg, grid), codes)
    rvq = LunaConfig(backbone=micro_backbone(), num_codebooks=4, codebook_size=64)
    plain = torch.randint(0, 64, (4, 5))
    assert torch.equal(grid_from_codes(rvq, plain), plain.T) and torch.equal(codes_from_grid(rvq, plain.T), plain)


def test_an_rvq_grid_of_fewer_cells_reads_a_residual_codecs_first_codebooks():
    rvq = LunaConfig(backbone=micro_backbone(), num_codebooks=4, codebook_size=64)
    codes = torch.randint(0, 64, (8, 5), generator=torch.Generator().manual_seed(1))  # (Q_c, T): 8 codebooks
    check_codec(rvq, (64,) * 8, "an 8-codebook codec")  # its first 4 codebooks are a code of their own
    assert torch.equal(grid_from_codes(rvq, codes), codes[:4].T)
    assert torch.equal(codes_from_grid(rvq, grid_from_codes(rvq, codes)), codes[:4])
    with pytest.raises(DuetError, match="needs 4 of 64"):
        check_codec(rvq, (64,) * 3, "a 3-codebook codec")
    with pytest.raises(DuetError, match="needs 4 of 64"):
        check_codec(rvq, (32,) * 8, "another alphabet")


def test_undecided_cells_wrong_codecs_and_bad_levels_are_refused():
    cfg = fsq_config()
    grid = torch.zeros((3, 8), dtype=torch.long)
    grid[1, 2] = cfg.mask_id
    with pytest.raises(DuetError, match="outside its cells' levels"):
        codes_from_grid(cfg, grid)
    with pytest.raises(DuetError, match="needs 2 of 2016"):
        check_codec(cfg, (2048,) * 8, "duet-rvq")
    with pytest.raises(DuetError, match="largest level"):
        LunaConfig(backbone=micro_backbone(), num_codebooks=8, codebook_size=9, fsq_levels=LEVELS)
    with pytest.raises(DuetError, match="whole groups"):
        LunaConfig(backbone=micro_backbone(), num_codebooks=6, codebook_size=8, fsq_levels=LEVELS)


def test_codes_a_cell_cannot_take_get_no_probability_even_under_cfg():
    torch.manual_seed(0)
    for tie in (False, True):
        cfg = replace(fsq_config(), tie_heads=tie)
        model = LunaModel(cfg).eval()
        inputs = LunaInputs(torch.tensor([[3, 4, 5]]), torch.tensor([3]), torch.full((1, 6, 8), cfg.mask_id),
                            torch.tensor([6]))
        with torch.no_grad():
            logits = model(inputs)  # (1, T, Q, K)
            uncond = model(replace(inputs, text_lengths=torch.tensor([0])))
        probs = logits.softmax(-1)
        for q, level in enumerate(cfg.cell_levels):
            assert float(probs[..., q, level:].sum()) == 0.0
            assert torch.allclose(probs[..., q, :level].sum(-1), torch.ones(1, 6))
        guided = uncond + 3.0 * (logits - uncond)
        assert bool(torch.isfinite(guided).all()) and float(guided.softmax(-1)[..., 2, 6:].sum()) == 0.0


def test_decoding_changes_masked_cells_only_and_stays_in_levels():
    torch.manual_seed(1)
    cfg = fsq_config()
    model = LunaModel(cfg).eval()
    g = torch.Generator().manual_seed(0)
    levels = torch.tensor(cfg.cell_levels)
    clean = (torch.rand(1, 9, 8, generator=g) * levels).long()  # (1, T, Q) valid codes
    hidden = torch.rand(1, 9, 8, generator=g) < 0.6
    tokens = clean.masked_fill(hidden, cfg.mask_id)
    inputs = LunaInputs(torch.tensor([[3, 4, 5, 6]]), torch.tensor([4]), tokens, torch.tensor([9]))
    out = maskgit_decode(model.logits_fn(inputs), tokens, cfg.mask_id, DecodeConfig(steps=4),
                         generator=torch.Generator().manual_seed(2)).tokens
    assert torch.equal(out[~hidden], clean[~hidden])  # visible cells untouched
    assert bool((out != cfg.mask_id).all()) and bool((out < levels).all())  # every cell decided, in its levels


def test_cfg_in_one_batch_equals_two_passes():
    torch.manual_seed(2)
    cfg = fsq_config()
    model = LunaModel(cfg).eval()
    inputs = LunaInputs(torch.tensor([[3, 4, 5, 6], [7, 8, 0, 0]]), torch.tensor([4, 2]),
                        torch.full((2, 5, 8), cfg.mask_id), torch.tensor([5, 3]))
    fn = model.logits_fn(inputs)
    tokens = inputs.target
    both = fn(tokens.repeat(2, 1, 1), torch.tensor([True, True, False, False]))  # (2B, T, Q, K)
    cond = fn(tokens, torch.tensor([True, True]))
    uncond = fn(tokens, torch.tensor([False, False]))
    for b, T in enumerate((5, 3)):
        assert torch.allclose(both[b, :T], cond[b, :T], atol=1e-5)
        assert torch.allclose(both[2 + b, :T], uncond[b, :T], atol=1e-5)


def test_the_data_layer_reads_fsq_shards_as_the_grid(tmp_path):
    manifest, shards = write_corpus(tmp_path, HashCodec((2016,) * 8, samples_per_frame=1024), "hash-fsq")
    tokenizer = get_tokenizer(train_tokenizer(manifest, tmp_path / "tokenizer.json", DATA, vocab_size=300))
    cfg = fsq_config(groups=8, vocab_size=512)
    data = LunaData.from_shards(shards, manifest, tokenizer, DATA, "train", model=cfg)
    packed = dict(iter(CodeShards(shards)))
    batch = data.make_batch(range(min(4, len(data))))
    inputs = batch.inputs
    for row in range(inputs.batch_size):
        item = data.items[row]
        T = int(inputs.target_lengths[row])
        assert T == packed[item.id].shape[1] == item.frames
        assert torch.equal(inputs.target[row, :T], grid_from_codes(cfg, packed[item.id]))  # (T, 32)
        assert bool((inputs.target[row, T:] == cfg.mask_id).all())
        assert int(batch.durations[row].sum()) == T  # the duration targets lay the text over exactly these frames
    with pytest.raises(DuetError, match="8 code streams of 2016 codes.*needs 8 of 2048"):
        LunaData.from_shards(shards, manifest, tokenizer, DATA, "train",
                             model=LunaConfig(backbone=micro_backbone(), num_codebooks=8, codebook_size=2048))


def test_the_maskgit_objective_is_the_mean_ce_of_masked_cells():
    g = torch.Generator().manual_seed(3)
    B, T, Q, K = 3, 5, 4, 8
    logits = torch.randn(B, T, Q, K, generator=g)
    target = torch.randint(0, K, (B, T, Q), generator=g)
    masked = torch.rand(B, T, Q, generator=g) < 0.5
    t = torch.tensor([0.3, 0.7, 0.9])
    lengths = torch.tensor([5, 3, 4])
    out = masked_diffusion_loss(logits, target, masked, t, lengths, objective="maskgit")
    ces, elbo = [], 0.0
    for b in range(B):
        for i in range(int(lengths[b])):
            for q in range(Q):
                if masked[b, i, q]:
                    ce = -float(F.log_softmax(logits[b, i, q], -1)[target[b, i, q]])
                    ces.append(ce)
                    elbo += ce / float(t[b])
    assert math.isclose(float(out.loss), sum(ces) / len(ces), rel_tol=1e-5)
    assert math.isclose(float(out.bound), elbo / (int(lengths.sum()) * Q), rel_tol=1e-5)
    # the noise level: cos(pi/2 u) of the same uniform draws the ELBO's t = 1 - u uses
    u = torch.rand(6, generator=torch.Generator().manual_seed(4))
    cosine = sample_noise_level(6, 1e-3, torch.Generator().manual_seed(4), objective="maskgit")
    assert torch.allclose(cosine, torch.cos(0.5 * math.pi * u).clamp(min=1e-3))


def test_the_fsq_preset_builds_and_runs():
    cfg = luna_preset("luna-tiny-fsq")
    assert cfg.cell_levels == LEVELS * 8 and cfg.tie_heads
    model = LunaModel(cfg).eval()
    assert model.audio_embed.weight.shape == (32 * 9, 256)
    inputs = LunaInputs(torch.tensor([[1, 2, 3]]), torch.tensor([3]), torch.full((1, 4, 32), cfg.mask_id),
                        torch.tensor([4]))
    with torch.no_grad():
        assert model(inputs).shape == (1, 4, 32, 8)


def test_a_tiny_fsq_luna_speaks_whole_and_streamed(tmp_path):
    speaker = duet.load(write_tiny_luna(tmp_path / "luna", fsq=True))
    codec = speaker.runtime.codec
    speech = speaker.speak("Hello there.", seed=0, steps=2)
    assert speech.audio.ndim == 1 and len(speech.audio) > 0 and len(speech.audio) % codec.samples_per_frame == 0
    assert bool(torch.isfinite(torch.from_numpy(speech.audio)).all())
    again = speaker.speak("Hello there.", seed=0, steps=2)
    assert (speech.audio == again.audio).all()
    realtime = duet.load(write_tiny_luna_realtime(tmp_path / "rt", end_bias=20.0, fsq=True))
    streamed = realtime.speak("Hello there.", seed=0, steps=2)
    assert len(streamed.audio) % codec.samples_per_frame == 0 and len(streamed.audio) > 0


def test_training_on_fsq_shards_with_the_maskgit_objective_exports_a_model_of_that_grid(tmp_path):
    manifest, shards = write_corpus(tmp_path, HashCodec((2016,) * 8, samples_per_frame=1024), "hash-fsq")
    model, duration = micro_configs()
    cfg = LunaTrainConfig(name="micro-fsq", model=replace(fsq_config(groups=8), backbone=model.backbone),
                          duration=duration, shards=str(shards), manifest=str(manifest), data=DATA,
                          loop=LoopConfig(max_steps=6, lr=3e-3, warmup_steps=1, log_every=1, val_every=3,
                                          diag_every=0, checkpoint_every=0),
                          diffusion=DiffusionConfig(objective="maskgit"), bpe_vocab=300)
    train_luna(cfg, tmp_path / "run", tokenizer="train-bpe", progress=False)
    rows = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "loss" in r]
    assert len(rows) == 6 and all(math.isfinite(r["loss"]) and math.isfinite(r["bound"]) for r in rows)
    decode = {"temperature": 0.0, "cfg_scale": 1.5, "steps": 16}
    loaded = load_luna(export_luna(tmp_path / "run", tmp_path / "export", decode=decode))
    assert loaded.bundle.acoustic.config.fsq_levels == LEVELS and loaded.codec["name"] == "hash-fsq"
    assert loaded.decode == decode
    with pytest.raises(DuetError, match="unknown decoding defaults"):
        export_luna(tmp_path / "run", tmp_path / "bad", decode={"gumbel": 1.0})


def test_a_models_decoding_defaults_reach_its_runtime_and_requests_still_override_them(tmp_path):
    from duet.tts.luna import load_luna_runtime
    from duet.tts.luna_realtime import load_realtime_runtime

    path = write_tiny_luna(tmp_path, fsq=True)
    meta = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**meta, "decode": {"temperature": 0.0, "cfg_scale": 1.0}}))
    runtime = load_luna_runtime(path)
    assert (runtime.config.decode.temperature, runtime.config.decode.cfg_scale) == (0.0, 1.0)
    assert runtime.config.decode.steps == 32  # keys it does not name keep the runtime's defaults
    realtime = write_tiny_luna_realtime(tmp_path / "rt", fsq=True)
    meta = json.loads((realtime / "config.json").read_text())
    (realtime / "config.json").write_text(json.dumps({**meta, "decode": {"temperature": 0.0}}))
    stream = load_realtime_runtime(realtime).config.stream.decode
    assert (stream.temperature, stream.steps) == (0.0, 8)  # Realtime's per-block default steps stay
    speaker = duet.load(path)
    default = speaker.speak("Hello there.", seed=0, steps=2).audio
    assert (default == speaker.speak("Hello there.", seed=0, steps=2, temperature=0.0, cfg_scale=1.0).audio).all()
    assert not (default == speaker.speak("Hello there.", seed=0, steps=2, temperature=1.0, cfg_scale=1.0).audio).all()


def _tone(sample_rate: int, seconds: float) -> np.ndarray:
    rng = np.random.default_rng(0)
    t = np.arange(round(seconds * sample_rate)) / sample_rate
    return (0.3 * np.sin(2 * np.pi * 180 * t) + 0.05 * rng.standard_normal(t.shape)).astype(np.float32)


@pytest.fixture(scope="module")
def fsq_speaker(tmp_path_factory):
    return duet.load(write_tiny_luna(tmp_path_factory.mktemp("luna-fsq"), fsq=True))


def test_cloning_by_infilling_keeps_the_prompt_as_the_codecs_codes_unfolded(fsq_speaker):
    clip = _tone(fsq_speaker.sample_rate, 0.8)
    prompt = fsq_speaker.voice_prompt(clip, "Good morning.")
    packed = fsq_speaker.codec.encode(torch.from_numpy(clip)[None]).codes[0]  # (8, P)
    cfg = fsq_speaker.runtime.grid
    assert prompt.grid.shape == (packed.shape[1], 32) and torch.equal(prompt.grid, grid_from_codes(cfg, packed))
    speech = fsq_speaker.speak("Hello there.", seed=3, steps=2, prompt=prompt)
    assert len(speech.audio) > 0 and len(speech.audio) % fsq_speaker.codec.samples_per_frame == 0


def test_editing_keeps_the_codes_outside_the_span(fsq_speaker):
    audio = _tone(fsq_speaker.sample_rate, 1.5)
    cfg = fsq_speaker.runtime.grid
    before = grid_from_codes(cfg, fsq_speaker.codec.encode(torch.from_numpy(audio)[None]).codes[0])  # (T, 32)
    edited = fsq_speaker.edit(audio, "Good morning.", (0.4, 0.9), seed=4, steps=2)
    a, b = edited.span
    assert 0 < a < b < before.shape[0] and edited.grid.shape == before.shape
    assert torch.equal(edited.grid[:a], before[:a]) and torch.equal(edited.grid[b:], before[b:])
    assert bool((edited.grid < torch.tensor(cfg.cell_levels)).all())  # every regenerated digit in its levels
    decoded = fsq_speaker.codec.decode(codes_from_grid(cfg, edited.grid)[None]).audio[0].numpy()
    spf = fsq_speaker.codec.samples_per_frame
    np.testing.assert_allclose(edited.speech.audio[a * spf:b * spf], decoded[a * spf:b * spf], atol=1e-6)
    fade = round(CROSSFADE_SECONDS * fsq_speaker.sample_rate)  # outside the span and its joins: the recording
    np.testing.assert_array_equal(edited.speech.audio[:a * spf - fade], audio[:a * spf - fade])
    np.testing.assert_array_equal(edited.speech.audio[b * spf + fade:], audio[b * spf + fade:])


def test_realtime_continues_an_fsq_luna_on_fsq_shards(tmp_path, capsys):
    from duet.luna.bundle import LunaBundle
    from duet.luna.shipped import load_luna_realtime, save_luna
    from duet.train.recipes.luna_realtime import main

    manifest, shards = write_corpus(tmp_path, HashCodec((2016,) * 8, samples_per_frame=1024), "hash-fsq")
    tokenizer = train_tokenizer(manifest, tmp_path / "tokenizer.json", DATA, vocab_size=300)
    model, duration = micro_configs()
    luna = LunaBundle(replace(fsq_config(groups=8), backbone=model.backbone), duration).eval()
    shipped = save_luna(luna, tokenizer, tmp_path / "luna-fsq", codec={"name": "hash-fsq"})
    argv = ["luna-realtime", "--init-from", str(shipped), "--shards", str(shards), "--manifest", str(manifest),
            "--out", str(tmp_path / "run"), "--block-size", "4", "--steps", "2", "--batch-frames", "120",
            "--max-batch", "4", "--val-every", "0", "--quiet"]
    assert main(argv) == 0
    assert main(["luna-realtime-export", str(tmp_path / "run"), "--out", str(tmp_path / "ship"), "--latest",
                 "--temperature", "0", "--steps", "4"]) == 0
    shipped = load_luna_realtime(tmp_path / "ship")
    assert shipped.bundle.acoustic.config.luna.fsq_levels == LEVELS
    assert shipped.decode == {"temperature": 0.0, "steps": 4}
    assert main(["luna-realtime-export", str(tmp_path / "run"), "--out", str(tmp_path / "bad"), "--latest",
                 "--temperature", "-1"]) == 2
    assert "temperature must be a number in [0, 10]" in capsys.readouterr().err
