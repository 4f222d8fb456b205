"""Cloning and editing as infilling: visible cells stay bit-identical; bad input gets a DuetError."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from duet.errors import DuetError
from duet.luna.decode import DecodeConfig
from duet.luna.infill import (
    check_prompt_audio,
    check_span,
    clone,
    edit,
    edit_span_frames,
    mask_span,
)
from duet.luna.model import LunaModel

FAST = DecodeConfig(steps=8)


@pytest.fixture
def model(make_config):
    torch.manual_seed(0)
    return LunaModel(make_config(q=3, k=16)).eval()


def _grid(T, Q=3, seed=0):
    return torch.randint(0, 16, (T, Q), generator=torch.Generator().manual_seed(seed))


def test_check_prompt_audio():
    sr = 16_000
    speech_like = 0.1 * np.sin(2 * np.pi * 220 * np.arange(sr) / sr)  # about -23 dBFS
    assert check_prompt_audio(speech_like).dtype == np.float32
    check_prompt_audio(torch.from_numpy(speech_like))
    with pytest.raises(DuetError, match="silent"):
        check_prompt_audio(np.zeros(sr))
    with pytest.raises(DuetError, match="silent"):
        check_prompt_audio(1e-4 * np.random.default_rng(0).standard_normal(sr))  # about -80 dBFS hiss
    with pytest.raises(DuetError, match="empty"):
        check_prompt_audio(np.zeros(0))
    with pytest.raises(DuetError, match="NaN"):
        check_prompt_audio(np.array([0.1, np.nan]))


def test_check_span():
    assert check_span((2, 5), 10) == (2, 5)
    assert check_span((0, 10), 10) == (0, 10)
    for bad in ((3, 3), (5, 2), (-1, 4), (8, 11), (10, 12)):
        with pytest.raises(DuetError, match="editing span"):
            check_span(bad, 10)


def test_mask_span_matches_naive_and_edit_span_frames():
    grid = _grid(10)
    for n in (1, 3, 6):
        out, span = mask_span(grid, (2, 5), n, 16)
        naive = [grid[i] for i in range(2)] + [torch.full((3,), 16)] * n + [grid[i] for i in range(5, 10)]
        assert torch.equal(out, torch.stack(naive)) and span == (2, 2 + n)
    with pytest.raises(DuetError, match="at least 1 frame"):
        mask_span(grid, (2, 5), 0, 16)
    assert edit_span_frames((2, 5), 40.0, 40.0) == 3
    assert edit_span_frames((2, 5), 40.0, 46.4) == 9
    assert edit_span_frames((2, 5), 40.0, 30.0) == 1  # never below one frame


@pytest.mark.parametrize("span_frames", [None, 2, 7])
def test_edit_keeps_cells_outside_the_span_bit_identical(model, span_frames):
    grid = _grid(12, seed=1)
    text = torch.tensor([1, 5, 9, 3])
    out = edit(model, text, grid, (4, 7), span_frames, FAST, torch.Generator().manual_seed(0))
    n = 3 if span_frames is None else span_frames
    assert out.span == (4, 4 + n) and out.grid.shape == (12 - 3 + n, 3)
    assert torch.equal(out.grid[:4], grid[:4])
    assert torch.equal(out.grid[4 + n :], grid[7:])
    assert int(out.grid.max()) < 16  # every regenerated cell is a real code


def test_edit_refuses_bad_spans_and_grids(model):
    grid = _grid(6)
    text = torch.tensor([1, 2])
    for bad in ((4, 4), (5, 9), (-2, 1)):
        with pytest.raises(DuetError, match="editing span"):
            edit(model, text, grid, bad, cfg=FAST)
    dirty = grid.clone()
    dirty[0, 0] = 16
    with pytest.raises(DuetError, match="clean codes"):
        edit(model, text, dirty, (1, 2), cfg=FAST)
    with pytest.raises(DuetError, match="at least 1 frame"):
        edit(model, text, grid, (1, 2), span_frames=0, cfg=FAST)


def test_clone_generates_a_full_grid_and_checks_its_prompt(model):
    prompt = _grid(5, seed=2)
    text = torch.tensor([4, 4, 7])
    out = clone(model, text, prompt, frames=9, cfg=FAST, generator=torch.Generator().manual_seed(0))
    assert out.shape == (9, 3) and int(out.max()) < 16 and int(out.min()) >= 0
    with pytest.raises(DuetError, match="zero frames"):
        clone(model, text, prompt[:0], frames=9, cfg=FAST)
    with pytest.raises(DuetError, match="at least 1"):
        clone(model, text, prompt, frames=0, cfg=FAST)
    with pytest.raises(DuetError, match=r"\(frames, 3\)"):
        clone(model, text, prompt[:, :2], frames=4, cfg=FAST)
    # the prompt really conditions the result: greedy decoding (no sampling noise to hide the tiny logit
    # differences of a random model) gives different grids for different prompts
    greedy = DecodeConfig(steps=8, temperature=0.0, gumbel_temperature=0.0)
    a = clone(model, text, prompt, frames=9, cfg=greedy)
    b = clone(model, text, _grid(5, seed=3), frames=9, cfg=greedy)
    assert not torch.equal(a, b)


def test_infill_leaves_model_mode_alone(model):
    model.train()
    edit(model, torch.tensor([1]), _grid(4), (1, 3), cfg=FAST)
    assert model.training
