"""SSML marks on their way to the audio (``duet.tts.pace``, ``duet.tts.pace_layout``): pieces and their marks, the
durations of randomly initialised aligned micro models of every family, and where the Speaker puts the pauses.
Random weights make noise, not speech: the layout (what the word timings read) is what is checked here, with the
pause fitting off; with it on, noise has no quiet stretch, so a break is spliced in (``test_pause_fit`` fits
synthetic pauses of known length; ``test_pace_shipped`` measures the silences in gepard-tiny's audio)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

import duet
from checkpoint_testing import write_tiny_gepard
from duet.errors import InvalidRequest
from duet.text.ssml import parse_ssml
from duet.tts.pace import MarkedPieces, Pace, gap_seconds, paced_pieces, piece_pace
from duet.tts.pause_fit import quiet_edges, quiet_runs
from duet.tts.retime import RetimeConfig
from duet.tts.speaker import Speaker
from duet.tts.timestamps import scaled
from duet.tts.wsola import stretch

# ---- pieces -----------------------------------------------------------------------------------------------------


def test_a_break_without_punctuation_gets_a_comma_and_its_offset():
    marked = parse_ssml('<speak>Hello world <break time="300ms"/> how are you?</speak>')
    piece = piece_pace(marked, marked.text, 0, first=True, last=True)
    assert piece.text == "Hello world, how are you?"
    assert piece.pace == Pace(breaks=((12, 0.3),))  # after the comma, before the space


def test_a_break_after_punctuation_keeps_the_text():
    marked = parse_ssml('<speak>Hello world, <break time="1s"/> "how" <break/> you.</speak>')
    piece = piece_pace(marked, marked.text, 0, first=True, last=True)
    assert piece.text == 'Hello world, "how", you.'
    assert piece.pace.breaks == ((12, 1.0), (19, 0.4))


def test_rates_cover_their_words_and_shift_with_the_commas():
    marked = parse_ssml('<speak>one <break/> <prosody rate="slow">two three</prosody> four</speak>')
    piece = piece_pace(marked, marked.text, 0, first=True, last=True)
    assert piece.text == "one, two three four"
    (a, b, rate), = piece.pace.rates
    assert piece.text[a:b] == "two three" and rate == 0.8


def test_breaks_at_the_ends_and_between_pieces():
    marked = parse_ssml('<speak><break time="500ms"/>One two. <break time="1s"/> Three four.<break time="2s"/>'
                        "</speak>")
    first, second = paced_pieces(marked, ["One two.", "Three four."])
    assert first.pace == Pace(breaks=((0, 0.5),))  # the text's leading pause is the first piece's own
    assert second.pace == Pace(before=1.0, after=2.0)  # the boundary's pause and the trailing one
    assert first.text == "One two." and second.text == "Three four."


def test_plain_pieces_carry_no_pace():
    assert [p.pace for p in paced_pieces(parse_ssml("<speak>One. Two.</speak>"), ["One.", "Two."])] == [None, None]


def test_a_rate_across_a_piece_boundary_is_cut_to_each_piece():
    marked = parse_ssml('<speak>One <prosody rate="fast">two. Three</prosody> four.</speak>')
    first, second = paced_pieces(marked, ["One two.", "Three four."])
    assert [first.text[a:b] for a, b, _ in first.pace.rates] == ["two."]
    assert [second.text[a:b] for a, b, _ in second.pace.rates] == ["Three"]


@pytest.mark.parametrize("step", [1, 5, 1000])
def test_marked_pieces_of_a_stream_carry_the_marks_of_the_whole_text(step):
    doc = ('<speak>Sure, <break time="300ms"/> the museum opens at nine. <break time="1s"/> Tickets are '
           '<prosody rate="slow">free</prosody> today.<break time="700ms"/></speak>')
    cutter = MarkedPieces()
    pieces = []
    for i in range(0, len(doc), step):
        pieces += cutter.push(doc[i:i + step])
    pieces += cutter.finish()
    texts = [p.text for p in pieces]
    assert " ".join(texts).replace(",,", ",") == "Sure, the museum opens at nine. Tickets are free today."
    whole = paced_pieces(parse_ssml(doc), [t for t in texts])
    assert [p.pace for p in pieces] == [p.pace for p in whole]
    assert pieces[1].pace.before == 1.0 and pieces[-1].pace.after == 0.7 and cutter.trailing == 0.0


def test_a_trailing_break_after_the_last_cut_piece_is_left_for_the_caller():
    cutter = MarkedPieces()
    pieces = cutter.push('<speak>The end. <break time="2s"/></speak>')
    pieces += cutter.finish()
    assert [p.text for p in pieces] == ["The end."] and cutter.trailing == 2.0


def test_the_gap_between_pieces_makes_the_pause_from_word_to_word():
    assert gap_seconds(1.0, 0.2, 0.1) == pytest.approx(0.7)
    assert gap_seconds(0.2, 0.3, 0.1) == 0.0  # the edges alone are longer: no silence added


# ---- the layout -------------------------------------------------------------------------------------------------


def _options(speaker) -> dict:
    return {"steps": 2} if speaker.runtime.traits.steps else {}


def _word(words, text):
    return next(w for w in words if w.word == text)


def _layout_only(speaker):
    """The same model with breaks left as the layout made them (no pause fitting)."""
    return Speaker(speaker.runtime, replace(speaker.config, retime=RetimeConfig(fit_pauses=False)))


@pytest.mark.parametrize("seconds", [0.3, 1.0])
def test_a_break_between_words_is_the_gap_in_the_layout(speaker, seconds):
    ssml = f'<speak>Hello there <break time="{seconds:g}s"/> how are you?</speak>'
    speech = _layout_only(speaker).speak(ssml, seed=0, **_options(speaker))
    assert speech.pieces == ("Hello there, how are you?",)
    gap = _word(speech.words, "how").start - _word(speech.words, "there").end
    # Luna rounds its grid to whole frames and stretches the layout to it: a fraction of a frame off
    tolerance = 1.0 / speaker.codec.frame_rate if type(speaker.runtime).__name__ == "LunaRuntime" else 1e-6
    assert gap == pytest.approx(seconds, abs=tolerance)


def test_a_break_before_the_first_word_is_the_leading_silence(gepard):
    speech = gepard.speak('<speak><break time="800ms"/>Hello there.</speak>', seed=0)
    assert speech.words[0].start == pytest.approx(0.8)


def test_a_rate_stretches_the_words_in_its_span(gepard):
    plain = gepard.speak("Hello there, how are you?", seed=0).words
    slow = gepard.speak('<speak>Hello there, <prosody rate="50%">how are</prosody> you?</speak>', seed=0).words
    for word, factor in (("Hello", 1.0), ("how", 2.0), ("are", 2.0)):
        a, b = _word(plain, word), _word(slow, word)
        assert b.end - b.start == pytest.approx(factor * (a.end - a.start))


def test_speed_and_rate_multiply_and_breaks_stay_absolute(gepard):
    text = '<speak>Hello <prosody rate="2">there</prosody> <break time="500ms"/> you.</speak>'
    fast = _layout_only(gepard).speak(text, seed=0, speed=2.0).words
    plain = gepard.speak("Hello there, you.", seed=0).words  # the break's comma is in what the model reads
    a, b = _word(plain, "there"), _word(fast, "there")
    assert b.end - b.start == pytest.approx((a.end - a.start) / 4)
    assert _word(fast, "you").start - _word(fast, "there").end == pytest.approx(0.5)


def _silent_run(audio, around: int) -> int:
    """Samples of the run of exact zeros that holds sample ``around``."""
    a = b = around
    while a > 0 and audio[a - 1] == 0:
        a -= 1
    while b < len(audio) and audio[b] == 0:
        b += 1
    return b - a


@pytest.mark.parametrize("seconds", [0.3, 1.0])
def test_a_fitted_break_in_noise_is_spliced_silence_and_the_words_move_with_it(speaker, seconds):
    ssml = f'<speak>Hello there <break time="{seconds:g}s"/> how are you?</speak>'
    laid = _layout_only(speaker).speak(ssml, seed=0, **_options(speaker))
    fitted = speaker.speak(ssml, seed=0, **_options(speaker))
    rate = fitted.sample_rate
    assert len(fitted.audio) == len(laid.audio) + round(seconds * rate)  # noise: no quiet run, the break spliced
    there, how = _word(fitted.words, "there"), _word(fitted.words, "how")
    assert there == _word(laid.words, "there")
    inserted = next(i for i in range(len(laid.audio)) if fitted.audio[i] != laid.audio[i])  # the splice's fade
    assert there.end <= inserted / rate <= _word(laid.words, "how").start  # inside the layout's gap
    zeros = _silent_run(fitted.audio, inserted + round(seconds * rate / 2))
    assert zeros == pytest.approx(seconds * rate, abs=2)  # the silence heard: the break (fades at its edges)
    assert how.start == pytest.approx(_word(laid.words, "how").start + seconds)
    times = [t for w in fitted.words for t in (w.start, w.end)]
    assert times == sorted(times) and 0 <= times[0] and times[-1] <= fitted.seconds


@pytest.mark.parametrize("text", ['<speak>Hello there <break time="{ms}ms"/> how are you?</speak>',
                                  '<speak>Hello there. <break time="{ms}ms"/> How are you?</speak>'],
                         ids=["within a sentence", "between sentences"])
@pytest.mark.parametrize("seconds", [0.3, 1.0])
def test_a_break_lasts_its_length_by_the_benchmarks_measure(speaker, seconds, text):
    """duet speak's side of what every serving path is held to (tests/serve/test_api_timestamps.py): the pause
    between the two words, by break_bench's energy threshold (duet.eval.pauses), is the break to within 60 ms,
    and the words stay in order inside the audio."""
    from duet.eval.pauses import pause_at

    speech = speaker.speak(text.format(ms=round(seconds * 1000)), seed=0, **_options(speaker))
    there, how = _word(speech.words, "there"), next(w for w in speech.words if w.word.lower() == "how")
    assert pause_at(speech.audio, speech.sample_rate, there.end, how.start) == pytest.approx(seconds, abs=0.06)
    times = [t for w in speech.words for t in (w.start, w.end)]
    assert times == sorted(times) and 0 <= times[0] and times[-1] <= speech.seconds


def _following(speaker, low: float, high: float):
    return Speaker(speaker.runtime, replace(speaker.config, retime=RetimeConfig(followed_speeds=(low, high))))


@pytest.mark.parametrize("speed, made_at", [(0.25, 0.5), (3.0, 1.5)])
def test_a_speed_outside_what_the_model_follows_is_made_at_the_nearest_and_stretched(gepard, speed, made_at):
    made = _following(gepard, 0.0, math.inf).speak("Hello there, how are you?", seed=0, speed=made_at)  # laid out
    stretched = _following(gepard, 0.5, 1.5).speak("Hello there, how are you?", seed=0, speed=speed)
    factor = made_at / speed
    assert np.array_equal(stretched.audio, stretch(made.audio, factor, made.sample_rate))
    assert stretched.words == scaled(made.words, factor)
    assert stretched.words[-1].end <= stretched.seconds


def test_a_break_at_a_stretched_speed_is_laid_out_for_its_length_after_the_stretch(gepard):
    text = '<speak>Hello there <break time="600ms"/> how are you?</speak>'
    words = _layout_only(_following(gepard, 0.5, 1.5)).speak(text, seed=0, speed=0.25).words
    assert _word(words, "how").start - _word(words, "there").end == pytest.approx(0.6)


def test_a_pause_between_pieces_is_sized_from_word_to_word(luna):
    speech = _layout_only(luna).speak('<speak>One two three. <break time="1s"/> Four five six.</speak>', seed=0, steps=2)
    assert len(speech.pieces) == 2
    pause = _word(speech.words, "Four").start - _word(speech.words, "three").end
    assert pause == pytest.approx(1.0, abs=2.0 / speech.sample_rate)


def test_a_pause_after_the_text_is_silence_after_its_last_word(luna):
    plain = luna.speak("One two three.", seed=0, steps=2)
    paused = _layout_only(luna).speak('<speak>One two three.<break time="1.5s"/></speak>', seed=0, steps=2)
    assert paused.words == plain.words
    assert paused.seconds - paused.words[-1].end == pytest.approx(max(1.5, plain.seconds - plain.words[-1].end),
                                                                 abs=2.0 / paused.sample_rate)
    assert (paused.audio[len(plain.audio):] == 0).all()


def _quiet_run_at(audio, rate, t: float) -> float:
    """Seconds of the quiet run (duet.tts.pause_fit's threshold, against the whole clip) that holds time t."""
    return next((b - a) / rate for a, b in quiet_runs(audio, rate) if a <= t * rate <= b)


def test_fitted_pauses_between_pieces_and_after_the_text_are_the_quiet_stretches(luna):
    speech = luna.speak('<speak>One two three. <break time="1s"/> Four five six.<break time="1.5s"/></speak>',
                        seed=0, steps=2)
    assert len(speech.pieces) == 2
    middle = (_word(speech.words, "three").end + _word(speech.words, "Four").start) / 2
    assert _quiet_run_at(speech.audio, speech.sample_rate, middle) == pytest.approx(1.0, abs=0.021)
    assert _quiet_run_at(speech.audio, speech.sample_rate, speech.seconds - 0.001) == pytest.approx(1.5, abs=0.021)
    times = [t for w in speech.words for t in (w.start, w.end)]
    assert times == sorted(times) and times[-1] <= speech.seconds


def test_quiet_edges_of_a_piece():
    rate = 16000
    tone = (0.5 * np.sin(2 * np.pi * 200 * np.arange(rate // 2) / rate)).astype(np.float32)
    audio = np.concatenate([np.zeros(int(0.25 * rate), np.float32), tone, np.zeros(int(0.4 * rate) + 7, np.float32)])
    lead, trail = quiet_edges(audio, rate)
    assert lead == pytest.approx(0.25, abs=0.011) and trail == pytest.approx(0.4 + 7 / rate, abs=0.011)
    assert quiet_edges(tone, rate) == (0.0, 0.0)
    assert quiet_edges(np.zeros(rate, np.float32), rate) == (1.0, 0.0)  # all quiet: counted once


def test_a_model_without_a_layout_refuses_marks_inside_the_text(tmp_path):
    plain = duet.load(write_tiny_gepard(tmp_path))  # no aligned text input
    with pytest.raises(InvalidRequest, match="SSML") as caught:
        plain.speak('<speak>Hello <break time="1s"/> there.</speak>', seed=0)
    assert caught.value.code == "ssml_unsupported"


def test_the_stream_and_speak_place_marks_alike(speaker):
    text = '<speak>One two. <break time="600ms"/> Three <prosody rate="slow">four</prosody>.</speak>'
    speech = speaker.speak(text, seed=3, **_options(speaker))
    words: list = []
    audio = list(speaker.stream(text, seed=3, words=words, **_options(speaker)))
    assert tuple(words) == speech.words
    assert sum(len(a) for a in audio) == len(speech.audio)


@pytest.mark.parametrize("text", ['<speak>One two. <break time="600ms"/> Three four.<break time="1s"/></speak>',
                                  '<speak>One two.<break time="1s"/></speak>'])
def test_text_spoken_as_it_arrives_pauses_as_the_whole_text_does(luna, text):
    """The pieces a stream cuts here are the whole text's sentences: the same audio, pauses included, in any
    deltas (a trailing break that arrives after the last piece was cut included)."""
    from duet.tts.live import speak_live

    speech = luna.speak(text, seed=2, steps=2)
    for step in (1, 7):
        audio, words = [], []
        speak_live(luna, [text[i:i + step] for i in range(0, len(text), step)], audio.append, seed=2, words=words,
                   steps=2)
        assert np.array_equal(np.concatenate(audio), speech.audio) and tuple(words) == speech.words
