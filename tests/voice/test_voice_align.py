"""Forced alignment of recordings: the timing sidecar gives back the aligner's durations, and the rules that call an
alignment poor."""

from __future__ import annotations

import numpy as np
import pytest

from duet.checkpoint_dir import checkpoints_root
from duet.data.timing import check_timing, text_words
from duet.data.token_timing import token_spans, wrapped_durations
from duet.text import get_tokenizer
from duet.text.phonemes import phonemize, phonemize_many
from duet.voice.align import AlignChecks, AlignedClip, AlignInput, align_clips, clip_timing, rate_problem

FRAME_RATE = 22_050 / 1024


@pytest.fixture(scope="module")
def tokenizer():
    return get_tokenizer(checkpoints_root() / "gepard-tiny" / "tokenizer.json")


def test_the_sidecar_reads_back_as_the_aligner_s_durations(tokenizer):
    text = "Hello there, my friend."
    ipa = phonemize(text, "en-us")
    encoding = tokenizer.backend_tokenizer.encode(ipa, add_special_tokens=False)
    rng = np.random.default_rng(0)
    durations = (4, *(int(d) for d in rng.integers(1, 5, len(encoding.ids))), 6)  # [SOT, tokens..., EOT]
    aligned = AlignedClip("x", durations, tuple(tuple(o) for o in encoding.offsets))
    words = text_words(text)
    timing = clip_timing(ipa, aligned, FRAME_RATE, words, phonemize_many(words, "en-us"))
    frames = sum(durations)
    assert check_timing(timing, frames / FRAME_RATE) == []
    assert [w for w, _, _ in timing.words] == words
    spans = token_spans(encoding.offsets, [(a, b) for _, a, b in timing.phones])
    back = wrapped_durations(spans, FRAME_RATE, frames)  # what aligned training reads (duet.data.token_timing)
    assert back == pytest.approx(durations, abs=1e-6)


def test_a_transcript_longer_than_its_audio_is_a_poor_alignment(tokenizer):
    rng = np.random.default_rng(0)
    short = AlignInput("short", phonemize("This text is far too long for the little audio it has.", "en-us"),
                       rng.standard_normal((8, 40)).astype(np.float32), 0.3)
    fine = [AlignInput(f"ok{i}", phonemize("Yes.", "en-us"), rng.standard_normal((20, 40)).astype(np.float32), 0.4)
            for i in range(3)]
    out = align_clips([short, *fine], tokenizer, FRAME_RATE)
    assert out["short"][0] == "poor alignment" and "frames" in out["short"][1]
    assert isinstance(out["ok0"], AlignedClip) and sum(out["ok0"].durations) == 20


def test_a_speaking_rate_far_from_the_others_is_poor():
    rates = [12.0, 11.0, 13.0, 12.5, 11.5, 12.2]
    cfg = AlignChecks()
    assert rate_problem(12.1, rates, cfg) is None
    assert "too long" in rate_problem(40.0, rates, cfg)[1]
    assert "too short" in rate_problem(3.0, rates, cfg)[1]
    assert rate_problem(16.0, [12.0] * 6, cfg) is None  # an even speaker: within the factor floor
