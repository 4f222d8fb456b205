"""Audio interface (Gepard §2.4) against a naive per-channel implementation; initialisation (§3.1)."""

from __future__ import annotations

import math

import torch
from gepard_testing import micro_config, random_codes

from duet.gepard.audio_interface import AudioInterface, channel_offsets
from duet.gepard.config import preset
from duet.gepard.heads import GepardHeads, pad_channels


def test_channel_offsets():
    offsets = channel_offsets((8, 7, 6, 6) * 8)
    assert offsets[:6].tolist() == [0, 8, 15, 21, 27, 35] and offsets[-1] == 216 - 6


def test_matches_naive_formula():
    torch.manual_seed(0)
    config = micro_config()
    interface = AudioInterface(config)
    text_embedding = torch.randn(64, 64) * 0.37
    interface.set_scale(text_embedding)
    g = torch.Generator().manual_seed(1)
    codes = torch.stack([random_codes(config, 5, g).T for _ in range(3)])  # (B, T, C)
    got = interface(codes)

    want = torch.empty(3, 5, config.width)
    for b in range(3):
        for t in range(5):
            u = torch.cat([interface.table(k)[codes[b, t, k]] for k in range(32)])  # e_0 .. e_31 concatenated
            h = interface.fc1.weight @ u + interface.fc1.bias
            h = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))  # exact GELU
            h = interface.fc2.weight @ h + interface.fc2.bias
            z = (h - h.mean()) / torch.sqrt(h.var(unbiased=False) + 1e-5)  # LayerNorm without gamma, beta
            want[b, t] = text_embedding.std() * z
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert interface.table(1).shape == (7, 2) and interface.table(31).shape == (6, 2)


def test_initialisation_of_the_report():
    torch.manual_seed(0)
    config = preset("gepard-tiny")
    interface = AudioInterface(config)
    tables = interface.tables.weight
    assert tables.shape == (216, config.audio_embed_dim)
    assert abs(tables.var().item() - 1.0) < 0.1  # variance 1.0
    for linear in (interface.fc1, interface.fc2):
        assert abs(linear.weight.std().item() * math.sqrt(linear.in_features) - 1.0) < 0.02  # std in^-1/2
        assert torch.count_nonzero(linear.bias) == 0
    assert not any(p is interface.s_audio for p in interface.parameters())  # a buffer, never trained
    assert "s_audio" in interface.state_dict()


def test_s_audio_tracks_the_text_embedding():
    from duet.gepard.model import GepardModel

    torch.manual_seed(0)
    model = GepardModel(micro_config())
    assert torch.isclose(model.audio_interface.s_audio, model.embed_tokens.weight.std())
    with torch.no_grad():
        model.embed_tokens.weight.mul_(5.0)  # e.g. a pretrained embedding was loaded
    model.refresh_audio_scale()
    assert torch.isclose(model.audio_interface.s_audio, model.embed_tokens.weight.std())
    # x_audio then has the text embedding's scale: LayerNorm gives unit variance per frame.
    x = model.audio_interface(torch.zeros(1, 4, 32, dtype=torch.long))
    assert torch.allclose(x.std(dim=-1, unbiased=False), model.embed_tokens.weight.std().expand(1, 4), rtol=1e-3)


def test_heads_are_32_independent_linears():
    torch.manual_seed(0)
    config = micro_config()
    heads = GepardHeads(config)
    hidden = torch.randn(2, 3, config.width)
    out = heads(hidden)
    start = 0
    for k, (level, chunk) in enumerate(zip(config.channel_levels, out.per_channel())):
        w, b = heads.codes.weight[start : start + level], heads.codes.bias[start : start + level]
        torch.testing.assert_close(chunk, hidden @ w.T + b)
        start += level
    assert out.stop.shape == (2, 3)
    torch.testing.assert_close(out.stop, (hidden @ heads.stop.weight.T + heads.stop.bias).squeeze(-1))


def test_pad_channels_against_loop():
    levels = (8, 7, 6, 6) * 8
    flat = torch.randn(2, 216)
    padded = pad_channels(flat, levels)
    assert padded.shape == (2, 32, 8)
    start = 0
    for k, level in enumerate(levels):
        assert torch.equal(padded[:, k, :level], flat[:, start : start + level])
        assert torch.isneginf(padded[:, k, level:]).all()
        start += level
