"""WER/CER against hand-counted edit operations (Seed-TTS-eval normalisation and mean-of-rates aggregation)."""

import pytest

from duet.errors import DuetError
from duet.metrics.wer import aggregate, char_error, normalize_text, word_error


def test_normalize_lowercases_strips_punctuation_collapses_space():
    assert normalize_text("  Hello,\tWORLD!!  How   are you? ") == "hello world how are you"
    # Seed-TTS deletes punctuation rather than splitting on it.
    assert normalize_text("A well-known «fact»; 3.5") == "a wellknown fact 35"
    assert normalize_text("你好，世界。") == "你好世界"


def test_event_tags_are_not_words():
    assert normalize_text("Well [laughter] I never. [Laughs]") == "well i never"
    assert normalize_text("A [sic] quote") == "a sic quote"  # a bracketed word that names no event stays
    assert word_error("Oh [cough] dear.", "oh dear").rate == 0.0


def test_substitution():
    e = word_error("the cat sat on the mat", "the cat sat on a mat")
    assert (e.substitutions, e.deletions, e.insertions, e.ref_len) == (1, 0, 0, 6)
    assert e.rate == pytest.approx(1 / 6)


def test_deletion():
    e = word_error("the cat sat on the mat", "the cat on the mat")
    assert (e.substitutions, e.deletions, e.insertions) == (0, 1, 0)
    assert e.rate == pytest.approx(1 / 6)


def test_insertion_and_rate_above_one():
    e = word_error("the cat sat", "the black cat sat")
    assert (e.substitutions, e.deletions, e.insertions) == (0, 0, 1)
    assert e.rate == pytest.approx(1 / 3)
    assert word_error("yes", "yes yes yes").rate == pytest.approx(2.0)  # 2 insertions / 1 word, not clipped


def test_case_and_punctuation_differences_are_not_errors():
    assert word_error("Hello, World! How are you?", "hello world how are you").rate == 0.0
    assert word_error("OK... fine.", "ok fine").rate == 0.0


def test_apostrophes_are_kept():
    e = word_error("Don't stop.", "dont stop")
    assert (e.reference, e.hypothesis) == ("don't stop", "dont stop")
    assert e.substitutions == 1 and e.rate == pytest.approx(1 / 2)
    assert word_error("I don\u2019t know", "i don't know").rate == 0.0  # typographic apostrophe == ASCII


def test_character_error_rate_ignores_whitespace():
    # a b c d e vs a b d d e: one substitution in 5 characters (the space is not a unit).
    e = char_error("abc de", "abd de")
    assert (e.substitutions, e.ref_len) == (1, 5)
    assert e.rate == pytest.approx(0.2)
    assert char_error("你好，世界", "你好世间").rate == pytest.approx(1 / 4)


def test_mean_of_rates_differs_from_pooled():
    short = word_error("hello there", "hello where")  # 1 / 2
    long = word_error("one two three four five six seven eight", "one two three four five six seven eight")  # 0 / 8
    agg = aggregate([short, long])
    assert agg.count == 2
    assert agg.mean == pytest.approx((0.5 + 0.0) / 2)  # Seed-TTS-eval: 0.25
    assert agg.pooled == pytest.approx(1 / 10)  # corpus level: 0.10


def test_empty_reference_and_empty_set_are_user_errors():
    with pytest.raises(DuetError, match="empty after normalisation"):
        word_error("?!", "anything")
    with pytest.raises(DuetError):
        aggregate([])
    assert word_error("two words", "").deletions == 2  # an empty transcript is legal: all deletions


def test_whisper_normaliser_reads_spellings_of_the_same_words_alike():
    pytest.importorskip("whisper_normalizer")
    # each pair is one utterance written two ways: counted wrong by the default, right by Whisper's normaliser
    for reference, heard in [("You are late.", "you're late"), ("The colour of honour.", "the color of honor"),
                             ("He was twenty three.", "he was 23"), ("Mr. Smith is here.", "mister smith is here")]:
        assert word_error(reference, heard).errors > 0
        assert word_error(reference, heard, "whisper").errors == 0
    assert word_error("the cat sat", "the cat sad", "whisper").errors == 1  # a wrong word stays wrong
    assert normalize_text("Well [laughter] I never.", "whisper") == "well i never"


def test_an_unknown_normaliser_is_an_error():
    with pytest.raises(DuetError, match="normaliser"):
        word_error("a", "a", "nope")
