"""GroupFSQ: index round trips, golden vectors, the three views, and (where NeMo is importable) bit-exactness."""

import importlib.util
import itertools

import pytest
import torch

from duet.codecs.fsq import FSQConfig, GroupFSQ

CFG = FSQConfig()


@pytest.fixture(scope="module")
def fsq() -> GroupFSQ:
    return GroupFSQ(CFG)


def _digits_naive(index: int, levels=(8, 7, 6, 6)) -> tuple[int, ...]:
    """Mixed radix by hand, first digit least significant."""
    out = []
    for level in levels:
        out.append(index % level)
        index //= level
    return tuple(out)


def test_config_numbers():
    assert CFG.codebook_size == 2016
    assert CFG.num_channels == 32
    assert sum(CFG.channel_levels) == 216  # 8x8 + 8x7 + 16x6 logits per frame (Gepard §2)


@pytest.mark.parametrize("index,digits", [(0, (0, 0, 0, 0)), (8, (0, 1, 0, 0)), (56, (0, 0, 1, 0)),
                                          (336, (0, 0, 0, 1)), (2015, (7, 6, 5, 5))])
def test_golden_vectors(fsq, index, digits):
    packed = torch.full((1, 8, 1), index)
    channels = fsq.unfold(packed)[0, :4, 0].tolist()
    assert tuple(channels) == digits


def test_every_index_round_trips_through_all_views(fsq):
    indices = torch.arange(2016)
    packed = indices.view(1, 1, -1).repeat(1, 8, 1)  # (1, 8, 2016): every index in every group
    channels = fsq.unfold(packed)
    assert torch.equal(fsq.fold(channels), packed)
    for i in (0, 1, 7, 8, 55, 56, 335, 336, 1000, 2015):
        assert tuple(channels[0, 4:8, i].tolist()) == _digits_naive(i)
    dequantised = fsq.decode(packed)
    assert dequantised.min() >= -1 and dequantised.max() <= 1
    assert torch.equal(fsq.dequantised_to_channels(dequantised), channels)
    # Re-quantising lands on the same index: invert the bounded tanh at each grid point (pulled 0.01 inside the
    # open tanh range, where the outermost grid points lie just beyond it).
    levels = fsq.levels.repeat(1, 8, 1)
    scale = (levels - 1) / 2 * (1 - CFG.eps)
    offset = torch.where(levels % 2 == 0, 0.5, 0.0)
    target = dequantised * (levels // 2)  # the rounded, compressed value
    target = torch.maximum(torch.minimum(target, scale - offset - 0.01), -scale - offset + 0.01)
    latent = torch.atanh((target + offset) / scale) - (offset / scale).tan()
    _, packed_again = fsq(latent)
    assert torch.equal(packed_again, packed)


def test_groups_own_their_channels(fsq):
    torch.manual_seed(0)
    latent = torch.randn(2, 32, 5)
    _, base = fsq(latent)
    latent[:, 4:8] += 3.0  # only group 1's channels move
    _, moved = fsq(latent)
    assert torch.equal(moved[:, [0, 2, 3, 4, 5, 6, 7]], base[:, [0, 2, 3, 4, 5, 6, 7]])
    assert not torch.equal(moved[:, 1], base[:, 1])


def test_forward_matches_naive_scalar_formula(fsq):
    """Each channel quantised with the DESIGN.md formulas written out in plain Python floats."""
    import math

    torch.manual_seed(1)
    latent = torch.randn(1, 32, 3) * 2
    deq, packed = fsq(latent)
    for g, t in itertools.product(range(8), range(3)):
        index = 0
        base = 1
        for d, level in enumerate(CFG.levels):
            x = float(latent[0, 4 * g + d, t])
            scale = (level - 1) / 2 * (1 - 1e-3)
            offset = 0.5 if level % 2 == 0 else 0.0
            value = round(scale * math.tanh(x + math.tan(offset / scale)) - offset)
            assert deq[0, 4 * g + d, t].item() == pytest.approx(value / (level // 2))
            index += (level // 2 + value) * base
            base *= level
        assert packed[0, g, t].item() == index


def test_straight_through_gradient(fsq):
    latent = torch.randn(1, 32, 4, requires_grad=True)
    deq, _ = fsq(latent)
    deq.sum().backward()
    assert latent.grad is not None and torch.all(latent.grad > 0)  # tanh' > 0, rounding passes gradient


def test_bad_shapes_and_ranges(fsq):
    with pytest.raises(ValueError, match="expected"):
        fsq(torch.randn(1, 31, 4))
    with pytest.raises(ValueError, match=r"\[0, 2016\)"):
        fsq.unfold(torch.full((1, 8, 2), 2016))


nemo_present = importlib.util.find_spec("nemo") is not None


@pytest.mark.skipif(not nemo_present, reason="nemo_toolkit not installed (optional extra duet[nemo])")
def test_bit_exact_with_nemo(fsq):
    from nemo.collections.tts.modules.audio_codec_modules import GroupFiniteScalarQuantizer

    ref = GroupFiniteScalarQuantizer(num_groups=8, num_levels_per_group=[8, 7, 6, 6]).eval()
    torch.manual_seed(2)
    latent = torch.randn(3, 32, 50) * 3
    lengths = torch.full((3,), 50)
    ref_deq, ref_idx = ref(inputs=latent, input_len=lengths)  # ref_idx (G, B, T)
    deq, packed = fsq(latent)
    assert torch.equal(deq, ref_deq)
    assert torch.equal(packed, ref_idx.permute(1, 0, 2).long())
    ref_back = ref.decode(indices=ref_idx, input_len=lengths)
    assert torch.equal(fsq.decode(packed), ref_back)
