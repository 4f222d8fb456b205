"""duet.nn.masks against naive loops."""

from __future__ import annotations

import torch

from duet.nn.masks import additive, bidirectional_mask, lengths_to_mask


def test_lengths_to_mask_matches_loop():
    lengths = torch.tensor([0, 3, 5, 1])
    got = lengths_to_mask(lengths, 5)
    for b in range(4):
        for i in range(5):
            assert bool(got[b, i]) == (i < int(lengths[b]))


def test_bidirectional_mask_is_key_padding_only():
    valid = torch.tensor([[True, True, False, True], [False, True, True, True]])
    got = bidirectional_mask(valid)
    assert got.shape == (2, 1, 4, 4)
    for b in range(2):
        for i in range(4):
            for j in range(4):
                assert bool(got[b, 0, i, j]) == bool(valid[b, j])  # no causal structure: any query sees any key


def test_additive_mask_values():
    allowed = torch.tensor([[True, False]])
    got = additive(allowed, torch.float32)
    assert got[0, 0] == 0 and got[0, 1] == torch.finfo(torch.float32).min and torch.isfinite(got).all()
