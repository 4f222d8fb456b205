"""The shipped gepard-tiny's word timings lie where its words are: against duet's forced aligner run on the audio
it made (``duet.eval.timestamps``), and against the audio's own loudness (speech inside words, quiet outside).
Tolerances are generous; ``benchmarks/timestamps_bench.py`` measures the agreement."""

from __future__ import annotations

import numpy as np
import pytest

import duet
from duet.checkpoint_dir import checkpoints_root
from duet.eval.timestamps import Spoken, boundary_errors, forced_words

pytestmark = pytest.mark.skipif(not (checkpoints_root() / "gepard-tiny" / "config.json").is_file(),
                                reason="gepard-tiny is not in this checkout")

TEXTS = ("Hello there.", "Please turn off the lights when you leave the room.",
         "The weather is nice, so we are going for a walk.", "Can you tell me where the train station is?",
         "Thank you very much for your help.", "Moses parted the Red Sea.")


@pytest.fixture(scope="module")
def gepard():
    return duet.load("gepard-tiny")


def _loudness(audio: np.ndarray, sample_rate: int, start: float, end: float) -> float:
    """Mean power of audio[start, end) in dB."""
    part = audio[int(start * sample_rate): max(int(end * sample_rate), int(start * sample_rate) + 1)]
    return float(10 * np.log10(np.mean(part.astype(np.float64) ** 2) + 1e-10))


def test_reported_words_agree_with_a_forced_alignment_of_the_audio(gepard):
    items = []
    for i, text in enumerate(TEXTS):
        speech = gepard.speak(text, seed=i)
        assert len(speech.pieces) == 1 and [w.word for w in speech.words][:1] == [text.split()[0].strip(".,?")]
        items.append(Spoken(text, speech.audio, speech.sample_rate, speech.words))
    reference = forced_words(items, gepard.runtime.tokenizer, gepard.codec.frame_rate, subdivide=2)
    errors = []
    for item, forced in zip(items, reference):
        starts, ends = boundary_errors(item.words, forced)
        errors += starts + ends
    assert np.median(errors) < 0.06 and np.percentile(errors, 90) < 0.25  # seconds; 46 ms is one model frame


def test_words_are_loud_and_the_joins_between_sentences_quiet(gepard):
    speech = gepard.speak("Please turn off the lights. Thank you very much.", seed=0)
    words, sr = speech.words, speech.sample_rate
    assert [w.word for w in words] == ["Please", "turn", "off", "the", "lights", "Thank", "you", "very", "much"]
    inside = _loudness(np.concatenate([speech.audio[int(w.start * sr): int(w.end * sr)] for w in words]), sr, 0, 1e9)
    join = _loudness(speech.audio, sr, words[4].end + 0.03, words[5].start - 0.03)  # the gap and the silences
    lead = _loudness(speech.audio, sr, 0.0, max(words[0].start - 0.01, 0.005))
    assert words[5].start - words[4].end >= gepard.config.gap_seconds
    assert inside - join > 20 and inside - lead > 20  # dB
