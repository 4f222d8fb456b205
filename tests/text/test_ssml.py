"""The SSML subset (``duet.text.ssml``): each element, where its marks land, every malformed case with the position
it names, and the streaming reader against the whole-document parse."""

from __future__ import annotations

import pytest

from duet.text.ssml import (
    MAX_BREAK_SECONDS,
    Break,
    Rate,
    SsmlError,
    SsmlReader,
    TextReader,
    is_ssml,
    parse_ssml,
    read_text,
)


def test_only_text_that_starts_with_speak_is_markup():
    assert is_ssml("<speak>Hi</speak>") and is_ssml("  \n<speak version='1.1'>Hi</speak>")
    for plain in ("Hi <break/> there", "a < b & c > d", "<speaker>Hi</speaker>", "x <speak>Hi</speak>", ""):
        assert not is_ssml(plain)
        assert read_text(plain).text == " ".join(plain.split()) and read_text(plain).plain


def test_speak_alone_is_its_text_with_whitespace_collapsed():
    marked = parse_ssml('<speak version="1.1" xmlns="http://www.w3.org/2001/10/synthesis" xml:lang="en-US">\n'
                        "  Hello   there.\n</speak>\n")
    assert marked.text == "Hello there." and marked.plain


def test_break_time_in_milliseconds_and_seconds_at_its_place():
    marked = parse_ssml('<speak>Hello <break time="300ms"/> big <break time="1.5s"/>world</speak>')
    assert marked.text == "Hello big world"
    # counted in non-whitespace characters before it: "Hello" = 5, "Hellobig" = 8
    assert marked.breaks == (Break(5, 0.3), Break(8, 1.5))


@pytest.mark.parametrize("strength, seconds", [("x-weak", 0.1), ("weak", 0.25), ("medium", 0.4), ("strong", 0.7),
                                               ("x-strong", 1.0)])
def test_break_strengths(strength, seconds):
    assert parse_ssml(f'<speak>a <break strength="{strength}"/> b</speak>').breaks == (Break(1, seconds),)


def test_a_bare_break_is_medium_none_is_no_break_and_time_wins_over_strength():
    assert parse_ssml("<speak>a <break/> b</speak>").breaks == (Break(1, 0.4),)
    assert parse_ssml('<speak>a <break strength="none"/> b</speak>').breaks == ()
    assert parse_ssml('<speak>a <break strength="weak" time="2s"/> b</speak>').breaks == (Break(1, 2.0),)


def test_breaks_at_either_end_and_before_punctuation():
    marked = parse_ssml('<speak><break time="1s"/>Hi<break time="200ms"/>, you.<break time="2s"/></speak>')
    assert marked.text == "Hi, you." and marked.breaks == (Break(0, 1.0), Break(2, 0.2), Break(7, 2.0))


@pytest.mark.parametrize("rate, value", [("x-slow", 0.6), ("slow", 0.8), ("medium", 1.0), ("fast", 1.25),
                                         ("x-fast", 1.5), ("80%", 0.8), ("+20%", 1.2), ("-10%", 0.9), ("1.5", 1.5)])
def test_prosody_rates(rate, value):
    marked = parse_ssml(f'<speak>one <prosody rate="{rate}">two three</prosody> four</speak>')
    assert marked.text == "one two three four"
    assert marked.rates == (() if value == 1.0 else (Rate(3, 11, pytest.approx(value)),))


def test_nested_rates_multiply_in_spans_that_do_not_overlap():
    marked = parse_ssml('<speak><prosody rate="50%">a <prosody rate="200%">bb</prosody> c</prosody> d</speak>')
    assert marked.rates == (Rate(0, 1, 0.5), Rate(3, 4, 0.5))  # "bb" at 0.5 x 2 = the normal rate: no span


def test_sub_speaks_its_alias_and_entities_are_decoded():
    marked = parse_ssml('<speak>The <sub alias="World Wide Web">WWW</sub> &amp; <sub alias="A &amp; B">AB</sub>'
                        ' &lt;3 &#65;&#x42;</speak>')
    assert marked.text == "The World Wide Web & A & B <3 AB"


def test_comments_are_skipped():
    assert parse_ssml("<speak>a<!-- a comment <break/> --> b</speak>").text == "a b"


@pytest.mark.parametrize("text, position, words", [
    ("<speak>Hello", 0, "never closed"),
    ("<speak>Hello</speak> there", 21, "after </speak>"),
    ("<speak>a < b</speak>", 9, "bare '<'"),
    ("<speak>a & b</speak>", 9, "bare '&'"),
    ("<speak>&nbsp;</speak>", 7, "unknown character reference"),
    ("<speak>&#xD800;</speak>", 7, "not a character"),
    ("<speak><p>x</p></speak>", 7, "unsupported element <p>"),
    ("<speak><emphasis>x</emphasis></speak>", 7, "unsupported element <emphasis>"),
    ("<speak><speak>x</speak></speak>", 7, "<speak> inside <speak>"),
    ("<speak>Hel<break/>lo</speak>", 10, "inside a word"),
    ('<speak>a <break time="3 days"/> b</speak>', 9, "break time"),
    ('<speak>a <break time="11s"/> b</speak>', 9, "at most"),
    ('<speak>a <break strength="loud"/> b</speak>', 9, "break strength"),
    ('<speak>a <break size="1"/> b</speak>', 9, "does not take 'size'"),
    ("<speak>a <break> b</break></speak>", 9, "empty"),
    ('<speak><prosody pitch="high">x</prosody></speak>', 7, "does not take 'pitch'"),
    ("<speak><prosody>x</prosody></speak>", 7, "needs a rate"),
    ('<speak><prosody rate="zippy">x</prosody></speak>', 7, "prosody rate"),
    ('<speak><prosody rate="0%">x</prosody></speak>', 7, "not a positive rate"),
    ('<speak><prosody rate="x-slow"><prosody rate="20%">x</prosody></prosody></speak>', 30, "must stay within"),
    ("<speak><sub>WWW</sub></speak>", 7, "needs an alias"),
    ('<speak><sub alias="x"><break/></sub></speak>', 22, "inside <sub>"),
    ('<speak><prosody rate="slow">x</speak>', 29, "still open"),
    ("<speak>x</prosody></speak>", 8, "</prosody> where <speak>"),
    ('<speak><break time=1s/></speak>', 7, "malformed attributes"),
    ('<speak><break time="1s" time="2s"/></speak>', 7, "given twice"),
    ("<speak foo='1'>x</speak>", 0, "does not take 'foo'"),
])
def test_malformed_markup_names_its_position(text, position, words):
    with pytest.raises(SsmlError) as caught:
        parse_ssml(text)
    err = caught.value
    assert err.position == position and words in str(err), str(err)
    assert str(err).startswith(f"SSML error at character {position}: ") and "\n" not in str(err)
    assert err.code == "invalid_ssml" and err.param == "input"


def test_a_break_bound_is_the_documented_one():
    assert parse_ssml(f'<speak>a <break time="{MAX_BREAK_SECONDS:g}s"/> b</speak>').breaks[0].seconds == 10.0


@pytest.mark.parametrize("step", [1, 2, 3, 7])
def test_the_streaming_reader_gives_the_whole_parse_in_any_deltas(step):
    doc = ('<speak>Hi &amp; <break time="300ms"/> there. <prosody rate="slow">Slow <sub alias="World Wide Web">'
           'WWW</sub></prosody> words.<!-- c --> <break strength="strong"/>End.</speak>')
    whole = parse_ssml(doc)
    reader = TextReader()
    plain = "".join(reader.push(doc[i:i + step]) for i in range(0, len(doc), step)) + reader.finish()
    assert " ".join(plain.split()) == whole.text
    assert tuple(reader.breaks) == whole.breaks and reader.rate_spans() == whole.rates and reader.ssml


def test_the_streaming_reader_hands_out_text_before_the_document_ends():
    reader = SsmlReader()
    assert reader.push("<speak>Hello there, ") == "Hello there, "
    assert reader.push("how <brea") == "how "  # the unfinished tag is held
    assert reader.push('k time="1s"/>are') == "are" and reader.breaks == [Break(14, 1.0)]


def test_the_text_reader_passes_plain_text_through_and_waits_only_for_a_possible_speak():
    reader = TextReader()
    assert reader.push("  <sp") == ""  # may still become <speak>
    assert reader.push("y> said hi") == "  <spy> said hi" and not reader.ssml
    assert reader.push(" <break/>") == " <break/>"  # plain text is never markup
    late = TextReader()
    assert late.push("<spe") == "" and late.finish() == "<spe"


def test_an_error_in_a_stream_is_raised_when_its_markup_arrives():
    reader = TextReader()
    reader.push("<speak>fine so far ")
    with pytest.raises(SsmlError, match="character 19: unsupported element <voice>"):
        reader.push("<voice>")
