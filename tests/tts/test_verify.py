"""Verified speech (``duet.tts.verify``) with a fake scorer: which makings are tried, with which seeds and sampling,
which is kept, what is reported, and that the kept audio is exactly that making's."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest

import duet
from checkpoint_testing import write_tiny_gepard
from duet.errors import DuetError
from duet.sampling import SamplingParams
from duet.tts.request import SynthesisRequest
from duet.tts.verify import SEED_STRIDE, BestOf, VerifyConfig, attempts, summary, verified_speech


@dataclass(frozen=True)
class Heard:
    wer: float
    transcript: str


class FakeScorer:
    """Answers each call with the next WER of ``wers`` (per text, in order) and records what it heard."""

    def __init__(self, wers: dict[str, list[float]]):
        self.wers = {text: list(v) for text, v in wers.items()}
        self.calls: list[tuple[str, np.ndarray]] = []

    def score(self, audio: np.ndarray, sample_rate: int, text: str) -> Heard:
        self.calls.append((text, audio.copy()))
        return Heard(self.wers[text].pop(0), f"heard {len(self.calls)}")


@pytest.fixture(scope="module")
def gepard(tmp_path_factory):
    speaker = duet.load(write_tiny_gepard(tmp_path_factory.mktemp("gepard"), aligned=True))
    runtime = speaker.runtime  # a random stop head may fire at once: off, so every making has audio
    runtime.config = replace(runtime.config, params=replace(runtime.config.params, stop_threshold=0.999999))
    return speaker


def test_retries_sample_with_other_seeds_and_a_greedy_request_gets_a_temperature():
    greedy = SynthesisRequest("Hi.", params=SamplingParams(temperature=0.0, top_k=0))
    tries = list(attempts(greedy, 5, VerifyConfig(tries=3, retry_temperature=0.5, retry_top_k=10)))
    assert [s for _, s in tries] == [5, 5 + SEED_STRIDE, 5 + 2 * SEED_STRIDE]
    assert tries[0][0] is greedy
    assert [(r.params.temperature, r.params.top_k) for r, _ in tries[1:]] == [(0.5, 10), (0.5, 10)]
    own_k = SynthesisRequest("Hi.", params=SamplingParams(temperature=0.0, top_k=3))
    assert [r.params.top_k for r, _ in attempts(own_k, 0, VerifyConfig())] == [3, 3, 3]
    sampled = SynthesisRequest("Hi.", params=SamplingParams(temperature=0.9, top_k=0))
    assert all(r.params == sampled.params for r, _ in attempts(sampled, 0, VerifyConfig()))


@pytest.mark.parametrize("wers, tries, kept, wer", [
    ([0.0], 1, 0, 0.0),  # heard right the first time: made once
    ([0.5, 0.2, 0.0], 3, 2, 0.0),  # made until heard right
    ([0.3, 0.5, 0.4], 3, 0, 0.3),  # never right: the best (the first) is kept
    ([0.4, 0.2, 0.2], 3, 1, 0.2),  # equals: the earliest
])
def test_the_best_making_is_kept(wers, tries, kept, wer):
    best = BestOf(0, "text", VerifyConfig(tries=3))
    for w in wers:
        best.offer(Heard(w, "x"))
        if best.done:
            break
    score = best.score()
    assert (score.tries, score.kept, score.wer, score.first_wer) == (tries, kept, wer, wers[0])


def test_a_threshold_stops_the_retries_early():
    best = BestOf(0, "text", VerifyConfig(max_wer=0.25, tries=5))
    for w in (0.5, 0.2, 0.0):
        best.offer(Heard(w, "x"))
        if best.done:
            break
    assert best.score().tries == 2


def test_bad_settings_are_refused():
    for bad in ({"tries": 0}, {"tries": 17}, {"max_wer": 1.5}, {"retry_temperature": 0.0}, {"retry_top_k": -1}):
        with pytest.raises(DuetError):
            VerifyConfig(**bad)


def test_verified_speech_keeps_each_pieces_best_making_exactly(gepard):
    text = "One two three. Four five six."
    scorer = FakeScorer({"One two three.": [0.6, 0.0], "Four five six.": [0.0]})
    speech, scores = verified_speech(gepard, text, scorer, VerifyConfig(tries=3), seed=11)
    assert [(s.piece, s.tries, s.kept, s.wer, s.first_wer) for s in scores] == [(0, 2, 1, 0.0, 0.6),
                                                                                 (1, 1, 0, 0.0, 0.0)]
    assert [t for t, _ in scorer.calls] == ["One two three.", "One two three.", "Four five six."]
    # the speech is the second making of piece 0 (a retry: its seed and the retry temperature), then piece 1 as is
    params = gepard.runtime.default_params
    retry_sampling = ({"temperature": params.temperature} if params.temperature else
                      {"temperature": VerifyConfig().retry_temperature, "top_k": params.top_k or VerifyConfig().retry_top_k})
    retry = gepard.speak("One two three.", seed=11 + SEED_STRIDE, **retry_sampling)
    second = gepard.speak("Four five six.", seed=12)
    assert np.array_equal(scorer.calls[1][1], retry.audio)
    gap = int(round(gepard.config.gap_seconds * gepard.sample_rate))
    assert np.array_equal(speech.audio, np.concatenate([retry.audio, np.zeros(gap, np.float32), second.audio]))
    assert speech.words[:3] == retry.words
    assert "2 pieces, 1 made again (3 makings); mean WER 0.300 -> 0.000" in summary(scores)


def test_without_a_retry_verified_speech_is_speak(gepard):
    scorer = FakeScorer({"Hello there.": [0.0]})
    speech, _ = verified_speech(gepard, "Hello there.", scorer, seed=4)
    plain = gepard.speak("Hello there.", seed=4)
    assert np.array_equal(speech.audio, plain.audio) and speech.words == plain.words
