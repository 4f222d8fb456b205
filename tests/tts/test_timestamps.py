"""Word timings through the Speaker (``duet.tts.timestamps``) on randomly initialised aligned micro models of every
family: the layout each runtime hands out, and where the Speaker places the words (speed, sentence joins,
streaming). Random weights say nothing about where speech is; ``test_timestamps_shipped`` checks that."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

import duet
from checkpoint_testing import never_stops, write_tiny_gepard
from duet.data.timing import is_separator
from duet.gepard.aligned import EOT_BACK
from duet.nn.aligned import frame_tokens
from duet.sampling import FrameBound
from duet.tts.live import speak_live
from duet.tts.request import SynthesisRequest
from duet.tts.timestamps import TextLayout, character_frames, piece_words, shifted
from duet.tts.word_map import word_map

TEXT = "Hello there, how are you? The quick brown fox."
WORDS = ["Hello", "there", "how", "are", "you", "The", "quick", "brown", "fox"]


def _options(speaker) -> dict:
    return {"steps": 2} if speaker.runtime.traits.steps else {}


def _check_words(words, seconds: float) -> None:
    assert words[0].start >= 0.0 and words[-1].end <= seconds + 1e-9
    for w, nxt in zip(words, words[1:]):
        assert w.start <= w.end <= nxt.start + 1e-9  # in order, not overlapping


def test_words_come_in_text_order_inside_the_audio(speaker):
    speech = speaker.speak(TEXT, seed=0, **_options(speaker))
    assert speaker.has_timings and speech.words is not None
    assert [w.word for w in speech.words] == WORDS
    _check_words(speech.words, speech.seconds)
    assert all(w.phones == () for w in speech.words)  # a text tokenizer: no phones


def test_every_step_output_carries_the_layout_the_frames_follow(speaker):
    runtime = speaker.runtime
    request = speaker.requests("Hello there.", seed=0, **_options(speaker))[0][0]
    state = runtime.prefill([request], [0])[0]
    try:
        layouts = [runtime.step([state])[0].layout for _ in range(2)]
    finally:
        runtime.release(state)
    assert isinstance(layouts[0], TextLayout) and layouts[0] is layouts[1]
    assert len(layouts[0].ids) == len(layouts[0].durations) and layouts[0].text == "Hello there."


def test_a_model_without_aligned_input_has_no_timings(tmp_path):
    speaker = never_stops(duet.load(write_tiny_gepard(tmp_path)))
    speaker.runtime.config = replace(speaker.runtime.config, bound=FrameBound(frames_per_token=0.0, margin_frames=4))
    assert not speaker.has_timings
    assert speaker.speak("Hello there.", seed=0).words is None
    collected: list = []
    assert len(np.concatenate(list(speaker.stream("Hello there.", seed=0, words=collected)))) > 0
    assert collected == []
    request = SynthesisRequest("Hello there.")
    state = speaker.runtime.prefill([replace(request, params=replace(request.params, max_frames=4))], [0])[0]
    assert speaker.runtime.step([state])[0].layout is None


def _fed_durations(family: str, state) -> torch.Tensor:
    """The frames per wrapped token (S,) the model's aligned input reads while it generates (``frame_tokens``)."""
    return state.rows[0].aligned.durations[0] if family == "gepard" else state.durations


@pytest.mark.parametrize("family", ["gepard", "luna"])
@pytest.mark.parametrize("speed", [1.0, 0.5])
def test_word_timings_are_the_layout_the_model_was_fed(family, speed, request):
    """The timings read the durations the frames followed, at any speed: unrounded, so every token boundary they
    report lies within half a frame of the frame where the fed token changes (frame f reads the token whose span
    holds f + 0.5), nowhere accumulating; each word starts and ends inside the frames of its own tokens."""
    speaker = request.getfixturevalue(family)
    runtime = speaker.runtime
    text = "Hello there, how are you?"
    req = speaker.requests(text, seed=0, speed=speed, **_options(speaker))[0][0]
    state = runtime.prefill([req], [0])[0]
    try:
        layout = runtime.step([state])[0].layout
        fed = _fed_durations(family, state).float().cpu()
    finally:
        runtime.release(state)
    np.testing.assert_array_equal(np.array(layout.durations, dtype=np.float32), fed.numpy())
    if family == "gepard":  # the predictor's durations divided by the speed, not rounded
        base = runtime._durations(speaker.requests(text, seed=0, **_options(speaker))[0][0])[0]
        np.testing.assert_allclose(fed.numpy(), base.numpy() / speed, rtol=1e-6)

    total = float(fed.sum())
    positions = torch.arange(math.ceil(total) + 2)[None]  # (1, F)
    eot_back = EOT_BACK if family == "gepard" else 1
    k = frame_tokens(fed[None], torch.tensor([len(fed)]), positions, eot_back)[0][0].numpy()  # (F,) token per frame
    eot = len(fed) - eot_back
    reported_ends = np.cumsum(layout.durations)
    for j in range(eot):  # where the frames fed tokens 0..j end, against where the layout says token j ends
        assert abs(float((k <= j).sum()) - reported_ends[j]) <= 0.5 + 1e-6

    wmap = word_map(layout.text, layout.tokenizer, layout.language)
    first = character_frames(wmap, layout.ids, layout.durations)[1]
    words = piece_words(layout, math.inf, speaker.codec.frame_rate)
    assert [w.word for w in words] == WORDS[:5]
    owner = {i: j for j, (a, b) in enumerate(wmap.offsets) for i in range(a, b)}
    rate = speaker.codec.frame_rate
    for w, (a, b) in zip(words, wmap.spans):
        spoken = [i for i in range(a, b) if not is_separator(wmap.surface[i])]
        lo, hi = first + owner[spoken[0]], first + owner[spoken[-1]]
        begin, end = (k < lo).sum(), (k <= hi).sum()  # the frames fed the word's tokens: [begin, end)
        assert begin - 0.5 - 1e-6 <= w.start * rate <= w.end * rate <= end + 0.5 + 1e-6
    _check_words(words, total / rate)


@pytest.mark.parametrize("family", ["gepard", "luna"])
@pytest.mark.parametrize("speed", [0.5, 2.0])
def test_speed_scales_the_words_with_the_audio(family, speed, request):
    speaker = request.getfixturevalue(family)
    text = "Hello there, how are you?"
    base = speaker.speak(text, seed=1, **_options(speaker))
    fast = speaker.speak(text, seed=1, speed=speed, **_options(speaker))
    assert [w.word for w in fast.words] == [w.word for w in base.words]
    if family == "gepard":  # durations / speed; the piece runs to its bound either way
        ratio = 1.0 / speed
        assert fast.words[-1].end < fast.seconds  # nothing clipped
    else:  # the layout is fitted to T = round(predicted / speed) frames: the audio
        ratio = fast.seconds / base.seconds
        assert ratio == pytest.approx(1.0 / speed, abs=2.0 / (base.seconds * speaker.codec.frame_rate))
    for a, b in zip(base.words, fast.words):
        assert b.start == pytest.approx(a.start * ratio, abs=1e-6)
        assert b.end == pytest.approx(a.end * ratio, abs=1e-6)
    _check_words(fast.words, fast.seconds)


def test_sentence_joins_place_each_pieces_words_after_the_gap(speaker):
    options = _options(speaker)
    joined = speaker.speak("Hello there. Good morning.", seed=5, **options)
    first = speaker.speak("Hello there.", seed=5, **options)
    second = speaker.speak("Good morning.", seed=6, **options)  # piece i samples with seed + i
    start = (len(first.audio) + round(speaker.config.gap_seconds * speaker.sample_rate)) / speaker.sample_rate
    assert joined.words == first.words + shifted(second.words, start)
    assert joined.words[2].start >= joined.words[1].end + speaker.config.gap_seconds
    _check_words(joined.words, joined.seconds)


def test_the_stream_collects_the_same_words_as_speak(speaker):
    options = _options(speaker)
    speech = speaker.speak(TEXT, seed=2, **options)
    words: list = []
    audio = np.concatenate(list(speaker.stream(TEXT, seed=2, words=words, **options)))
    np.testing.assert_array_equal(audio, speech.audio)
    assert tuple(words) == speech.words


def test_speaking_text_as_it_arrives_collects_the_same_words(luna):
    speech = luna.speak(TEXT, seed=3, steps=2)
    words: list = []
    audio: list = []
    speak_live(luna, list(TEXT), audio.append, seed=3, words=words, steps=2)
    np.testing.assert_array_equal(np.concatenate(audio), speech.audio)
    assert tuple(words) == speech.words


def test_luna_reports_the_new_text_only_when_cloning(luna):
    rng = np.random.default_rng(0)
    prompt = luna.voice_prompt((0.1 * rng.standard_normal(luna.sample_rate)).astype(np.float32), "Hello there.")
    speech = luna.speak("Good morning.", seed=0, steps=2, prompt=prompt)
    assert [w.word for w in speech.words] == ["Good", "morning"]
    _check_words(speech.words, speech.seconds)


def test_emotion_tokens_and_event_tags_are_not_words(luna):
    speech = luna.speak("Well [laughter] good morning.", seed=0, steps=2, emotion="happy")
    assert [w.word for w in speech.words] == ["Well", "good", "morning"]
    _check_words(speech.words, speech.seconds)
