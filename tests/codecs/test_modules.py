"""Codec building blocks against independent references: librosa's mel filters, a naive overlap-add loop,
torch's own iSTFT, and the receptive fields the streaming decoders rely on."""

import numpy as np
import pytest
import torch

from duet.codecs.modules import (
    ConvNeXtStack,
    ISTFTHead,
    LogMel,
    PaddedConv1d,
    depth_to_space,
    mel_filterbank,
    overlap_add,
    space_to_depth,
)


@pytest.mark.parametrize("sr,n_fft,n_mels", [(22050, 1024, 80), (24000, 960, 80), (16000, 512, 40)])
def test_mel_filterbank_matches_librosa(sr, n_fft, n_mels):
    librosa = pytest.importorskip("librosa")
    ref = librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, htk=False, norm="slaney")
    np.testing.assert_allclose(mel_filterbank(sr, n_fft, n_mels), ref, rtol=1e-4, atol=1e-7)


def _naive_ola(frames, hop, offset, length):
    b, f, n = frames.shape
    out = torch.zeros(b, length)
    for j in range(f):
        for i in range(n):
            s = j * hop - offset + i
            if 0 <= s < length:
                out[:, s] += frames[:, j, i]
    return out


@pytest.mark.parametrize("offset", [0, 3])
def test_overlap_add_matches_naive_loop(offset):
    torch.manual_seed(0)
    frames = torch.randn(2, 5, 8)
    torch.testing.assert_close(overlap_add(frames, 2, offset, 10), _naive_ola(frames, 2, offset, 10))


def test_istft_head_same_layout_inverts_an_stft():
    """Feeding the head the exact STFT of a signal (its log-magnitude and phase) gives the signal back away from
    the sequence edges: the synthesis is a proper inverse, with the steady-state window normalisation."""
    n_fft, hop, frames = 64, 16, 40
    head = ISTFTHead(dim=1, n_fft=n_fft, hop=hop, layout="same")
    torch.manual_seed(0)
    x = torch.randn(1, frames * hop)
    # Analysis frames aligned with the head's "same" layout: frame j starts at j*hop - (n_fft - hop)/2.
    pad = (n_fft - hop) // 2
    spec = torch.stft(torch.nn.functional.pad(x, (pad, n_fft)), n_fft, hop, window=head.window, center=False,
                      return_complex=True)[..., :frames]  # (1, N/2+1, F)
    frames_t = torch.fft.irfft(spec.transpose(1, 2), n=n_fft) * head.window  # (1, F, N)
    y = overlap_add(frames_t, hop, head.offset, frames * hop) / head.envelope
    torch.testing.assert_close(y[:, n_fft:-n_fft], x[:, n_fft:-n_fft], atol=1e-5, rtol=1e-5)


def test_causal_logmel_never_looks_ahead():
    mel = LogMel(24000, 960, 240, 40, causal=True)
    x = torch.randn(1, 2400)
    y = x.clone()
    y[:, 1200:] = 0.0
    torch.testing.assert_close(mel(x)[..., :5], mel(y)[..., :5])  # frames 0-4 end at or before sample 1200


def test_receptive_fields_are_exact():
    torch.manual_seed(0)
    stack = torch.nn.Sequential(PaddedConv1d(4, 8, 5), ConvNeXtStack(8, 2, kernel_size=7))
    left = right = 2 + 6
    x = torch.randn(1, 4, 40)
    y = x.clone()
    y[..., 20] += 1.0
    diff = (stack(x) - stack(y)).abs().amax(dim=1)[0]
    changed = torch.nonzero(diff > 0).flatten()
    assert int(changed.min()) == 20 - right and int(changed.max()) == 20 + left


def test_space_depth_round_trip():
    x = torch.randn(2, 3, 12)
    assert space_to_depth(x, 4).shape == (2, 12, 3)
    assert torch.equal(depth_to_space(space_to_depth(x, 4), 4), x)
    assert torch.equal(space_to_depth(x, 4)[0, :4, 1], x[0, 0, 4:8])  # frame 1 holds sub-frames 4..7 of channel 0
