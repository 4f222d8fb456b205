import pytest

from duet.text.sentences import split_sentences


def test_sentence_ends_and_abbreviations():
    text = "Dr. Smith arrived at 5 p.m. today. Was he late?  He said \"Stop!\" Then J. R. R. Tolkien wrote it."
    assert split_sentences(text) == ["Dr. Smith arrived at 5 p.m. today.", "Was he late?", "He said \"Stop!\"",
                                     "Then J. R. R. Tolkien wrote it."]


def test_long_sentences_are_cut_at_clauses_then_words():
    clause = "the quick brown fox jumps over the lazy dog"
    text = ", ".join([clause] * 6) + "."
    pieces = split_sentences(text, max_chars=100)
    assert all(len(p) <= 100 for p in pieces) and len(pieces) > 1
    assert all(p.endswith((",", ".")) for p in pieces)  # cut after clause marks
    words = " ".join(["word"] * 100)
    pieces = split_sentences(words, max_chars=30)
    assert all(len(p) <= 30 for p in pieces) and " ".join(pieces) == words


@pytest.mark.parametrize("text", ["", "   ", "One.", "a b c", "Hi! Ho? Yes. " * 40, "x" * 500])
def test_pieces_join_back_to_the_input(text):
    pieces = split_sentences(text, max_chars=50)
    assert " ".join(pieces) == " ".join(text.split())
    assert all(pieces)
