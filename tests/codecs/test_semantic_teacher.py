"""The Whisper teacher of semantic distillation (the bundled tiny.en encoder): targets of the codec's frame rate,
a batch of short windows encodes each crop close to Whisper's own padded 30 s window, bad input is refused; and the
distillation loss of duet-rvq's first codebook equals a by-hand computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from duet.errors import DuetError

pytest.importorskip("ctranslate2")


@pytest.fixture(scope="module")
def teacher():
    from duet.codecs.semantic import load_teacher

    return load_teacher("whisper")


def _speechlike(seconds: float, rate: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(round(seconds * rate)) / rate
    f0 = 120 + 40 * np.sin(2 * np.pi * 2.5 * t + seed)
    voiced = sum(np.sin(2 * np.pi * k * np.cumsum(f0) / rate) / k for k in range(1, 8))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t + seed) ** 2
    return (0.2 * voiced * envelope + 0.01 * rng.standard_normal(t.shape)).astype(np.float32)


def test_targets_have_the_codecs_frames_and_the_encoders_width(teacher):
    assert teacher.hidden_size == 384  # Whisper tiny's encoder
    audio = torch.from_numpy(np.stack([_speechlike(1.0, 22050, s) for s in range(3)]))  # (3, S)
    target = teacher(audio, 22050, frames=21)
    assert target.shape == (3, 21, 384) and torch.isfinite(target).all() and not target.requires_grad


def test_a_batch_of_crops_encodes_each_as_it_would_alone_in_a_padded_30_s_window(teacher):
    import ctranslate2

    clips = [_speechlike(1.0, 16000, s) for s in range(2)] + [_speechlike(0.6, 16000, 5)]
    batched = teacher.encode(clips)
    assert [b.shape for b in batched] == [(50, 384), (50, 384), (30, 384)]

    def padded_30_s(clip: np.ndarray) -> torch.Tensor:  # Whisper's own input: the clip, then silence to 30 s
        window = np.zeros(16000 * 30, np.float32)
        window[: len(clip)] = clip
        mel = np.ascontiguousarray(teacher.features(window, padding=0)[None, :, :3000], dtype=np.float32)
        return torch.from_numpy(np.array(teacher.whisper.encode(ctranslate2.StorageView.from_array(mel),
                                                                to_cpu=True)))[0]  # (1500, H)

    full = [padded_30_s(c) for c in clips]
    for i, got in enumerate(batched):
        own = float(F.cosine_similarity(got, full[i][: len(got)], dim=-1).mean())
        other = float(F.cosine_similarity(got, full[(i + 1) % 3][: len(got)], dim=-1).mean())
        # these tones are far from speech; on one-second crops of joe the mean cosine is 0.92 (module docstring)
        assert own > 0.6 and own > other + 0.1, (own, other)


def test_bad_teachers_and_clips_are_refused(teacher, tmp_path):
    from duet.codecs.semantic import load_teacher

    with pytest.raises(DuetError, match="no model.bin"):
        load_teacher(f"whisper:{tmp_path}")
    with pytest.raises(DuetError, match="at most 30 s"):
        teacher.encode([np.zeros(16000 * 31, np.float32)])


def test_the_distillation_loss_is_one_minus_cosine_of_the_projected_first_codebook():
    from duet.codecs.rvq_codec import RVQCodec
    from duet.train.codec_config import preset

    torch.manual_seed(0)
    model = RVQCodec(preset("rvq-tiny").model).train()
    model.enable_semantic(6)
    audio = torch.randn(2, model.cfg.samples_per_frame * 5) * 0.1
    target = torch.randn(2, 5, 6)
    out = model(audio, semantic_target=target)
    with torch.no_grad():
        first = model.quantizer.quantizers[0].lookup(out.codes[:, 0])  # (B, T, D_q): the first codebook's vectors
        total, n = 0.0, 0
        for b in range(2):
            for t in range(5):
                pred = model.semantic_proj.weight @ first[b, t] + model.semantic_proj.bias
                cos = float(pred @ target[b, t] / (pred.norm() * target[b, t].norm()))
                total, n = total + 1.0 - cos, n + 1
    assert float(out.losses["semantic"].detach()) == pytest.approx(total / n, rel=1e-4)
