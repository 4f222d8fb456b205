"""The speech API's free-text instructions read as one emotion: an exact name or a short instruction with one
emotion word; anything else refused naming the choices."""

import pytest

from duet.errors import InvalidRequest
from duet.text.instructions import EMOTION_WORDS, MAX_WORDS, emotion_of_instructions
from duet.text.tokens import EMOTIONS


@pytest.mark.parametrize("text, emotion", [
    ("happy", "happy"),
    ("Happy", "happy"),
    ("  whisper ", "whisper"),
    ("speak happily", "happy"),
    ("Say it in a sad voice.", "sad"),
    ("angrily, please", "angry"),
    ("sound surprised!", "surprised"),
    ("a scared, fearful tone", "fearful"),  # two words of one emotion
    ("whisper it", "whisper"),
    ("", None),
    ("   ", None),
    (None, None),
])
def test_one_emotion_is_read(text, emotion):
    assert emotion_of_instructions(text) == emotion


@pytest.mark.parametrize("text, why", [
    ("speak slowly", "name no emotion"),
    ("bored", "name no emotion"),
    ("happy then sad", "2 emotions (happy, sad)"),
    ("don't sound angry", "negation"),
    ("not happy", "negation"),
    ("please read this sentence in a warm and very happy voice", f"longer than {MAX_WORDS} words"),
])
def test_anything_else_is_refused_naming_the_choices(text, why):
    with pytest.raises(InvalidRequest) as err:
        emotion_of_instructions(text)
    assert why in str(err.value) and ", ".join(EMOTIONS) in str(err.value)
    assert (err.value.param, err.value.code) == ("instructions", "invalid_value")


def test_every_emotion_has_its_name_among_its_words():
    assert tuple(EMOTION_WORDS) == EMOTIONS
    for name, words in EMOTION_WORDS.items():
        assert name in words and emotion_of_instructions(name) == name
