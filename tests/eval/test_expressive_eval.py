"""duet's expressive measures: YIN pitch, the prosodic emotion classifier, event F1 and PCER."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from duet.eval.emotion import EmotionClassifier, accuracy, emotion_similarity
from duet.eval.event_scores import EventCounts, match_events, paralinguistic_cer, tagged_transcript, total
from duet.eval.pitch import yin


@pytest.mark.parametrize("f0", [85.0, 140.0, 260.0])
def test_yin_finds_the_pitch_of_a_pulse_train(f0):
    sr = 22050
    t = np.arange(sr) / sr
    x = 0.3 * np.sign(np.sin(2 * np.pi * f0 * t)) * (1 + 0.2 * np.sin(2 * np.pi * 3 * t))
    track, hop = yin(x, sr)
    assert hop == 0.01 and (track > 0).mean() > 0.9
    assert abs(np.median(track[track > 0]) / f0 - 1) < 0.01
    silent, _ = yin(np.zeros(sr, dtype=np.float32) + 1e-7 * np.random.default_rng(0).standard_normal(sr), sr)
    assert (silent > 0).mean() < 0.5


def naive_counts(ref, det, tol):
    """Hand rule for one-to-one matching: try every assignment (tiny inputs), keep the largest."""
    from itertools import permutations

    best = 0
    for order in permutations(range(len(det))):
        used, hits = set(), 0
        for i, r in enumerate(ref):
            for j in order:
                d = det[j]
                if j not in used and d[0] == r[0] and abs(d[1] - r[1]) <= tol:
                    used.add(j)
                    hits += 1
                    break
        best = max(best, hits)
    return best


def test_event_f1_against_a_hand_computation():
    ref = [("laughter", 1.0, 1.6), ("cough", 2.0, 2.2), ("breath", 3.0, 3.4)]
    det = [("laughter", 1.1, 1.7), ("cough", 2.5, 2.7), ("breath", 3.05, 3.3), ("sigh", 4.0, 4.8)]
    c = match_events(ref, det, tolerance=0.25)
    # by hand: laughter 0.1 s off (hit), cough 0.5 s off (miss), breath 0.05 s off (hit), sigh unmatched
    assert (c.true_positives, c.detections, c.references) == (2, 4, 3)
    assert c.precision == 2 / 4 and c.recall == 2 / 3
    assert c.f1 == pytest.approx(2 * (1 / 2) * (2 / 3) / (1 / 2 + 2 / 3))
    assert match_events(ref, det, tolerance=0.25, same_name=False).true_positives == 2
    assert match_events(ref, det, tolerance=0.6).true_positives == 3
    rng = np.random.default_rng(0)
    names = ["a", "b"]
    for _ in range(200):
        r = [(names[rng.integers(2)], float(rng.uniform(0, 3)), 0.0) for _ in range(rng.integers(0, 4))]
        d = [(names[rng.integers(2)], float(rng.uniform(0, 3)), 0.0) for _ in range(rng.integers(0, 4))]
        assert match_events(r, d, 0.5).true_positives == naive_counts(r, d, 0.5)
    summed = total([EventCounts(1, 2, 2), EventCounts(0, 0, 1)])
    assert (summed.true_positives, summed.detections, summed.references) == (1, 2, 3)
    assert EventCounts(0, 0, 0).f1 == 1.0


def test_pcer_counts_each_tag_as_one_character():
    assert paralinguistic_cer("Well [laughter] no", "well [laugh] no").errors == 0
    miss = paralinguistic_cer("Well [laughter] no", "well no")
    assert miss.deletions == 1 and miss.ref_len == len("wellno") + 1
    swap = paralinguistic_cer("hi [cough]", "hi [sigh]")
    assert swap.substitutions == 1 and swap.ref_len == 3
    words = [("Well", 0.1, 0.4), ("no", 1.2, 1.4)]
    assert tagged_transcript(words, [("laughter", 0.5, 1.0)]) == "Well [laughter] no"


def test_classifier_learns_a_synthetic_set_and_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    centres = {"happy": np.array([3.0, 1.0]), "sad": np.array([-3.0, -1.0]), "neutral": np.zeros(2)}
    x = np.concatenate([c + rng.standard_normal((40, 2)) for c in centres.values()])
    y = [k for k in centres for _ in range(40)]
    features = ("a", "b")
    clf = EmotionClassifier.fit(x, y, features=features)
    assert accuracy(y, clf.predict(x)).overall > 0.8
    path = clf.save(tmp_path / "clf.json")
    assert path.read_text().startswith("{")
    from duet.eval import emotion

    with pytest.raises(Exception, match="other features"):
        emotion.EmotionClassifier.load(path)  # two toy features are not the prosodic ones
    assert emotion_similarity([1, 0, 0], [1, 0, 0]) == pytest.approx(1.0)
    assert emotion_similarity([1, 0, 0], [0, 1, 0]) == pytest.approx(0.0)


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs the espeak-ng program")
def test_style_classifier_is_well_above_chance_on_held_out_sentences(tmp_path):
    from duet.data.expressive import speaker
    from duet.data.presets import espeak
    from duet.data.sources.base import RenderItem
    from duet.data.styles import STYLE_NAMES
    from duet.eval.prosody import prosodic_features

    sentences = ["The old house stood at the end of the lane.", "Please bring the blue folder to my office.",
                 "We walked along the river until the sun went down.", "Nobody expected the train to be on time.",
                 "My brother planted tomatoes behind the garage.", "The meeting was moved to Thursday afternoon."]
    voice = espeak("en-us", "f3", pitch=60, rate=165)
    rows = []
    for style in STYLE_NAMES:
        spk = speaker(voice, style)
        items = [RenderItem(f"{style}{i}", s, str(tmp_path / f"{style}{i}.wav")) for i, s in enumerate(sentences)]
        assert spk.render(items) == [None] * len(items)
        for i, item in enumerate(items):
            audio, sr = sf.read(item.out, dtype="float32")
            rows.append((i, style, prosodic_features(audio, sr, len(sentences[i].split()))))
    train = [r for r in rows if r[0] < 4]
    test = [r for r in rows if r[0] >= 4]
    clf = EmotionClassifier.fit(np.array([r[2] for r in train]), [r[1] for r in train])
    clf = EmotionClassifier.load(clf.save(Path(tmp_path) / "clf.json"))
    result = accuracy([r[1] for r in test], clf.predict(np.array([r[2] for r in test])))
    assert result.overall >= 0.5  # chance is 1/6
