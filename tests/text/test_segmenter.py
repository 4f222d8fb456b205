import random

import pytest

from duet.text.normalize import normalize_text
from duet.text.segmenter import SegmenterConfig, TextSegmenter

ADVERSARIAL = {
    "number": "It costs $3,250.75 today, or 12.5% less than 1,000 dollars on 3/4/2025. Then it rose again.",
    "abbreviation": "Dr. Smith met Mr. Jones at 5 p.m. on Main St. in the U.S. yesterday. They talked, e.g. about rain.",
    "url": "Visit https://example.com/a.b?c=1&d=2 or www.duet.org. Then write to me at joe@example.com, please.",
    "emoji": "Great news 😀🎉 we won! Everyone cheered 👏, and then we all went home 🏠.",
    "no punctuation": " ".join(f"word{i}" for i in range(120)),
    "long sentence": ("the quick brown fox jumps over the lazy dog and " * 12).strip() + ".",
    "whitespace": "  Hello   there,\n\nhow are\tyou today?   Fine.  ",
}


def splits(text: str, rng: random.Random) -> list[list[str]]:
    """The text as single characters, as whole words with their spaces, and as random chunks."""
    words, rest = [], text
    while rest:
        cut = len(rest) - len(rest.lstrip())
        cut += len(rest[cut:].split(maxsplit=1)[0]) if rest[cut:] else 0
        words.append(rest[:cut])
        rest = rest[cut:]
    chunks, i = [], 0
    while i < len(text):
        n = rng.randint(1, 9)
        chunks.append(text[i:i + n])
        i += n
    return [list(text), words, chunks, [text]]


def run(deltas: list[str], config: SegmenterConfig = SegmenterConfig()) -> list[str]:
    seg = TextSegmenter(config)
    pieces = []
    for d in deltas:
        pieces += seg.push(d)
    return pieces + seg.finish()


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_no_word_is_dropped_or_repeated_however_the_text_is_split(name):
    text = ADVERSARIAL[name]
    rng = random.Random(name)
    results = [run(deltas) for deltas in splits(text, rng)]
    for pieces in results:
        assert pieces == results[-1]  # the cuts depend on the text, not on the deltas
        assert all(pieces)
        assert " ".join(pieces) == " ".join(text.split())
        # normalising piece by piece gives what normalising the whole text gives
        assert " ".join(normalize_text(p) for p in pieces) == normalize_text(text)


def test_cuts_at_sentence_ends_and_clauses_but_not_inside_tokens():
    pieces = run(list(ADVERSARIAL["abbreviation"]))
    assert pieces == ["Dr. Smith met Mr. Jones at 5 p.m. on Main St. in the U.S. yesterday.",
                      "They talked, e.g. about rain."]
    assert run(list(ADVERSARIAL["number"]))[0] == "It costs $3,250.75 today,"  # a clause after 3 words, first piece


def test_a_piece_is_ready_as_soon_as_the_whitespace_after_its_mark_arrives():
    seg = TextSegmenter()
    assert seg.push("Hello there") == []
    assert seg.push(".") == []  # "there." could still be "there.com"
    assert seg.push(" How") == ["Hello there."]
    assert seg.push(" are you") == []
    assert seg.held == "How are you"  # the whitespace after a cut goes with the piece
    assert seg.finish() == ["How are you"]


def test_the_first_piece_may_end_at_a_short_clause_and_later_ones_wait_for_longer_clauses():
    seg = TextSegmenter(SegmenterConfig(first_clause_words=3, clause_words=6))
    assert seg.push("Well, I think so, ") == ["Well, I think so,"]  # "Well," has too few words
    assert seg.push("but you, ") == []
    assert seg.push("my friend, may not agree. ") == ["but you, my friend, may not agree."]


def test_text_without_punctuation_is_cut_between_words_at_the_bound():
    cfg = SegmenterConfig(first_max_chars=20, max_chars=30)
    pieces = run(list(" ".join(["abcd"] * 30)), cfg)
    assert len(pieces[0]) <= 20 and all(len(p) <= 30 for p in pieces)
    assert " ".join(pieces) == " ".join(["abcd"] * 30)
    assert run(["x" * 50 + " tail"], cfg) == ["x" * 50, "tail"]  # one word longer than the bound stays whole


def test_a_stall_speaks_the_complete_words_and_holds_half_a_word():
    seg = TextSegmenter(SegmenterConfig(idle_seconds=0.5))
    assert seg.push("Once upon a ti", now=10.0) == []
    assert seg.poll(10.4) == []
    assert seg.poll(10.6) == ["Once upon a"]
    assert seg.poll(11.0) == []  # nothing complete left
    assert seg.push("me there", now=11.2) == []
    assert seg.finish() == ["time there"]


def test_end_of_input_and_empty_input():
    assert run(["   ", "\n"]) == []
    seg = TextSegmenter()
    seg.finish()
    with pytest.raises(ValueError, match="ended"):
        seg.push("more")


def test_bad_configs_are_refused():
    with pytest.raises(ValueError):
        SegmenterConfig(clause_words=0)
    with pytest.raises(ValueError):
        SegmenterConfig(idle_seconds=0)
