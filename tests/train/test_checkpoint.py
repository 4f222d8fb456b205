"""Checkpoints: safetensors + JSON only, atomic pointer, pruning, and an exact restore of optimizer and RNGs."""

import json
import random

import torch
from torch import nn

from duet.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint


def _setup(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.8, 0.99))
    return model, opt


def _step(model, opt, gen):
    x = torch.randn(16, 4, generator=gen)
    loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean() + 0.01 * torch.randn(())
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def test_restore_makes_next_steps_identical(tmp_path):
    model, opt = _setup()
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        _step(model, opt, gen)
    save_checkpoint(tmp_path, 3, {"m": model}, {"m": opt}, generators={"data": gen}, extra={"note": "x"})
    random.random()
    expected = [_step(model, opt, gen) for _ in range(3)]

    model2, opt2 = _setup(seed=123)  # different init: everything must come from the checkpoint
    gen2 = torch.Generator().manual_seed(999)
    state = load_checkpoint(latest_checkpoint(tmp_path), {"m": model2}, {"m": opt2}, generators={"data": gen2})
    assert state["step"] == 3 and state["extra"] == {"note": "x"}
    assert [_step(model2, opt2, gen2) for _ in range(3)] == expected  # bit-identical


def test_files_and_pruning(tmp_path):
    model, opt = _setup()
    gen = torch.Generator()
    _step(model, opt, gen)
    for step in (10, 20, 30):
        save_checkpoint(tmp_path, step, {"m": model}, {"m": opt}, keep=2)
    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_00000020", "step_00000030"]
    assert latest_checkpoint(tmp_path).name == "step_00000030"
    files = sorted(p.name for p in (root / "step_00000030").iterdir())
    assert files == ["model.safetensors", "optim.safetensors", "state.json"]
    json.loads((root / "step_00000030" / "state.json").read_text())


def test_no_checkpoint_is_none(tmp_path):
    assert latest_checkpoint(tmp_path) is None
