"""Short-register text repetition (Gepard §1.2, §1.4)."""

import random
from collections import Counter

import pytest

from duet.errors import DuetError
from duet.text.augment import (
    RepetitionConfig,
    augment_text,
    count_words,
    is_short_register,
    prefill_text,
    repeat_text,
)


@pytest.mark.parametrize(
    "text, n",
    [
        ("Yes.", 1),
        ("Thank you!", 2),
        ("I'm here", 2),
        ("don't stop now", 3),
        ("[laughter] okay", 1),
        ("<|emo_happy|>Hi", 1),
        ("...", 0),
        ("", 0),
        ("forty-two", 2),
    ],
)
def test_count_words(text, n):
    assert count_words(text) == n


def test_repeat_text():
    assert repeat_text(" Yes. ", 3) == "Yes. Yes. Yes."
    assert repeat_text("ok", 2, separator=", ") == "ok, ok"


def test_prefill_repeats_only_short_texts():
    cfg = RepetitionConfig()
    assert prefill_text("Yes.", cfg) == "Yes. Yes. Yes."
    assert prefill_text("Thank you!", cfg) == "Thank you! Thank you! Thank you!"
    assert prefill_text("Three whole words.", cfg) == "Three whole words."
    assert prefill_text("", cfg) == ""
    assert prefill_text("Go", RepetitionConfig(min_copies=1, inference_copies=1)) == "Go"


def test_augment_deterministic_given_seed():
    out = [augment_text("Hello", seed) for seed in range(50)]
    assert out == [augment_text("Hello", seed) for seed in range(50)]
    a, b = random.Random(7), random.Random(7)
    assert [augment_text("Hi there", a) for _ in range(30)] == [augment_text("Hi there", b) for _ in range(30)]


def test_augment_matches_hand_simulation():
    # Two draws per short text: u ~ U[0,1) decides, then copies ~ randint(min, max), drawn either way.
    cfg = RepetitionConfig(prob=0.5, min_copies=2, max_copies=4)
    rng, twin = random.Random(3), random.Random(3)
    for _ in range(40):
        u, copies = twin.random(), twin.randint(2, 4)
        expected = " ".join(["Yes."] * copies) if u < 0.5 else "Yes."
        assert augment_text("Yes.", rng, cfg) == expected


def test_augment_leaves_long_text_and_rng_alone():
    rng = random.Random(0)
    state = rng.getstate()
    assert augment_text("This sentence is long enough.", rng) == "This sentence is long enough."
    assert rng.getstate() == state


def test_augment_distribution():
    cfg = RepetitionConfig(prob=0.5, min_copies=2, max_copies=4)
    rng = random.Random(0)
    counts = Counter(count_words(augment_text("word", rng, cfg)) for _ in range(4000))
    assert set(counts) == {1, 2, 3, 4}
    assert abs(counts[1] / 4000 - 0.5) < 0.03  # left plain with probability 1 - prob
    for copies in (2, 3, 4):
        assert abs(counts[copies] / 4000 - 0.5 / 3) < 0.03


def test_prob_extremes():
    assert all(augment_text("ok", s, RepetitionConfig(prob=0.0)) == "ok" for s in range(20))
    assert all(augment_text("ok", s, RepetitionConfig(prob=1.0)) != "ok" for s in range(20))


def test_short_register_threshold():
    assert is_short_register("one two")
    assert not is_short_register("one two three")
    assert is_short_register("one two three", RepetitionConfig(max_words=3))


@pytest.mark.parametrize(
    "kwargs", [dict(min_copies=0), dict(min_copies=3, inference_copies=2), dict(inference_copies=5), dict(prob=1.5)]
)
def test_bad_config(kwargs):
    with pytest.raises(DuetError):
        RepetitionConfig(**kwargs)
