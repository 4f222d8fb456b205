"""The shipped gepard-tiny's SSML breaks are silences where its layout puts them, fitted to their length: measured
by an energy threshold (``duet.eval.pauses``) in the audio it made. ``benchmarks/results/timestamps.md`` measures them on held-out
sentences."""

from __future__ import annotations

from dataclasses import replace

import pytest

import duet
from duet.checkpoint_dir import checkpoints_root
from duet.eval.pauses import pause_at
from duet.tts.retime import RetimeConfig
from duet.tts.speaker import Speaker

pytestmark = pytest.mark.skipif(not (checkpoints_root() / "gepard-tiny" / "config.json").is_file(),
                                reason="gepard-tiny is not in this checkout")


@pytest.fixture(scope="module")
def gepard():
    return duet.load("gepard-tiny")


def _word(words, text):
    return next(w for w in words if w.word == text)


@pytest.mark.parametrize("seconds", [0.3, 1.0])
def test_a_break_is_a_silence_of_its_length_between_its_words(gepard, seconds):
    text = f'<speak>Please turn off the lights <break time="{seconds:g}s"/> when you leave.</speak>'
    laid = Speaker(gepard.runtime, replace(gepard.config, retime=RetimeConfig(fit_pauses=False))).speak(text, seed=0)
    before, after = _word(laid.words, "lights"), _word(laid.words, "when")
    assert after.start - before.end == pytest.approx(seconds, abs=1e-6)  # the layout: what the timings say
    assert pause_at(laid.audio, laid.sample_rate, before.end, after.start) == pytest.approx(seconds, abs=0.1)
    speech = gepard.speak(text, seed=0)  # the pause the model made, fitted to the break (duet.tts.pause_fit)
    before, after = _word(speech.words, "lights"), _word(speech.words, "when")
    measured = pause_at(speech.audio, speech.sample_rate, before.end, after.start)
    assert measured == pytest.approx(seconds, abs=0.03)  # the audio: quiet that long, there
    assert after.start - before.end == pytest.approx(seconds, abs=0.15)  # the timings moved with the audio


def test_a_pause_between_sentences_and_after_the_text_are_silences_too(gepard):
    speech = gepard.speak('<speak>Hello there. <break time="1s"/> How are you?<break time="500ms"/></speak>', seed=0)
    assert len(speech.pieces) == 2
    before, after = _word(speech.words, "there"), _word(speech.words, "How")
    assert pause_at(speech.audio, speech.sample_rate, before.end, after.start) == pytest.approx(1.0, abs=0.03)
    end = speech.words[-1].end
    assert pause_at(speech.audio, speech.sample_rate, end, speech.seconds) == pytest.approx(0.5, abs=0.03)


def test_a_slow_span_makes_longer_audio(gepard):
    plain = gepard.speak("Thank you very much for your help.", seed=0)
    slow = gepard.speak('<speak>Thank you <prosody rate="x-slow">very much</prosody> for your help.</speak>', seed=0)
    a, b = _word(plain.words, "much"), _word(slow.words, "much")
    assert (b.end - b.start) == pytest.approx((a.end - a.start) / 0.6, rel=1e-6)
    assert slow.seconds > plain.seconds + 0.1
