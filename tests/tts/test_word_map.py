"""Words over a model's input characters (``duet.tts.word_map``) and a layout read into word times
(``duet.tts.timestamps.piece_words``), on hand-made layouts: no model runs."""

from __future__ import annotations

import pytest

from duet.text import get_tokenizer
from duet.text.bpe import BPEConfig, load_bpe, save_bpe, train_bpe
from duet.text.prompts import prepare_input
from duet.text.tokens import service_ids
from duet.tts.timestamps import TextLayout, WordTiming, phone_groups, piece_words, shifted
from duet.tts.word_map import display_words, word_map

GEPARD_TOKENIZER = "checkpoints/gepard-tiny/tokenizer.json"


@pytest.fixture(scope="module")
def ab_tokenizer(tmp_path_factory):
    """A BPE that reads "ab cd" as the tokens "ab" and " cd"."""
    path = save_bpe(train_bpe(["ab cd ab cd"] * 5, BPEConfig(vocab_size=259)), tmp_path_factory.mktemp("bpe") / "t.json")
    return load_bpe(path)


@pytest.fixture(scope="module")
def phonemes():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    return get_tokenizer(str(root / GEPARD_TOKENIZER))


def _layout(tokenizer, text: str, durations, **kw) -> TextLayout:
    service = service_ids(tokenizer)
    ids = (service.sot, *tokenizer.encode(text, add_special_tokens=False), service.eot)
    return TextLayout(text, ids, tuple(float(d) for d in durations), tokenizer, **kw)


def test_display_words_keep_what_was_written_where_the_normaliser_maps_one_to_one():
    spoken = "Doctor Smith paid three dollars and fifty cents in nineteen eighty-four for seven".split()
    written = "Dr. Smith paid $3.50 in 1984 for 7!"
    assert display_words(written, spoken) == ["Dr", "Smith", "paid", "three", "dollars", "and", "fifty", "cents",
                                              "in", "nineteen", "eighty-four", "for", "7"]
    assert display_words("Well [laughter] hello there.", ["Well", "hello", "there"]) == ["Well", "hello", "there"]


def test_a_token_span_is_shared_by_its_characters_and_separators_stay_out_of_words(ab_tokenizer):
    # [SOT, "ab", " cd", EOT] over frames [0, 2) [2, 4) [4, 7) [7, 8); one frame per second
    layout = _layout(ab_tokenizer, "ab cd", [2, 2, 3, 1])
    words = piece_words(layout, frames=8, frame_rate=1.0)
    assert words == (WordTiming("ab", 2.0, 4.0), WordTiming("cd", 5.0, 7.0))  # " cd": the space takes 4..5
    half = piece_words(layout, frames=8, frame_rate=2.0)
    assert [(w.start, w.end) for w in half] == [(1.0, 2.0), (2.5, 3.5)]


def test_times_are_clipped_to_the_audio_the_piece_has(ab_tokenizer):
    layout = _layout(ab_tokenizer, "ab cd", [2, 2, 3, 1])
    assert [(w.start, w.end) for w in piece_words(layout, frames=6, frame_rate=1.0)] == [(2.0, 4.0), (5.0, 6.0)]
    stopped = piece_words(layout, frames=3, frame_rate=1.0)  # the model stopped inside "ab"
    assert [(w.start, w.end) for w in stopped] == [(2.0, 3.0), (3.0, 3.0)]


def test_a_voice_prompts_transcript_lies_before_the_first_frame_and_is_not_reported(ab_tokenizer):
    # the transcript "ab" (with SOT) is laid over 4 prompt frames; " cd" and EOT over the generated frames
    layout = _layout(ab_tokenizer, "ab cd", [1, 3, 3, 1], offset=4.0, prompt_tokens=2)
    assert piece_words(layout, frames=4, frame_rate=1.0) == (WordTiming("cd", 1.0, 3.0),)


def test_an_instruction_token_before_the_text_is_skipped(ab_tokenizer):
    service = service_ids(ab_tokenizer)
    ids = (service.sot, service.emotion("happy"), *ab_tokenizer.encode("ab cd", add_special_tokens=False), service.eot)
    layout = TextLayout("ab cd", ids, (1.0, 1.0, 2.0, 3.0, 1.0), ab_tokenizer)
    assert [(w.start, w.end) for w in piece_words(layout, 8, 1.0)] == [(2.0, 4.0), (5.0, 7.0)]


def test_shifted_moves_words_and_phones():
    from duet.tts.timestamps import PhoneTiming

    word = WordTiming("a", 1.0, 2.0, (PhoneTiming("a", 1.0, 2.0),))
    assert shifted([word], 0.5) == (WordTiming("a", 1.5, 2.5, (PhoneTiming("a", 1.5, 2.5),)),)


def test_phones_carry_their_stress_and_length_marks():
    surface = "ˈeɪɾiː"
    assert [p for p, _, _ in phone_groups(surface, range(len(surface)))] == ["ˈe", "ɪ", "ɾ", "iː"]


def test_phoneme_words_are_found_in_the_ipa_even_where_espeak_joins_them(phonemes):
    text = "Of the two, I paid $3 for it."
    wmap = word_map(text, phonemes)
    assert wmap is not None and wmap.phonemes
    assert wmap.words == ("Of", "the", "two", "I", "paid", "three", "dollars", "for", "it")
    assert list(wmap.ids) == phonemes.encode(prepare_input(text), add_special_tokens=False)  # as a runtime reads it
    assert all(a < b for a, b in wmap.spans)
    assert all(b1 <= a2 for (_, b1), (a2, _) in zip(wmap.spans, wmap.spans[1:]))  # in order, not overlapping


def test_phoneme_layout_gives_phones_inside_their_words(phonemes):
    text = "Hello there, how are you?"
    n = len(phonemes.encode(text, add_special_tokens=False))
    layout = _layout(phonemes, text, [3.0] + [1.5] * n + [4.0])
    words = piece_words(layout, frames=int(3 + 1.5 * n + 4), frame_rate=10.0)
    assert [w.word for w in words] == ["Hello", "there", "how", "are", "you"]
    for w, nxt in zip(words, words[1:] + (None,)):
        assert w.phones and w.phones[0].start == w.start and w.phones[-1].end == w.end
        assert all(p.start <= p.end for p in w.phones)
        assert nxt is None or w.end <= nxt.start
    assert words[0].start == pytest.approx(0.3)  # after SOT's 3 frames of leading silence
