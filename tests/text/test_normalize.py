"""English normalisation against hand-written readings."""

import pytest

from duet.text.normalize import cardinal, decimal, normalize_text, ordinal, year


@pytest.mark.parametrize(
    "n, words",
    [
        (0, "zero"),
        (7, "seven"),
        (13, "thirteen"),
        (20, "twenty"),
        (21, "twenty-one"),
        (99, "ninety-nine"),
        (100, "one hundred"),
        (101, "one hundred one"),
        (999, "nine hundred ninety-nine"),
        (1000, "one thousand"),
        (1001, "one thousand one"),
        (12345, "twelve thousand three hundred forty-five"),
        (1_000_000, "one million"),
        (2_000_017, "two million seventeen"),
        (
            1_234_567_890,
            "one billion two hundred thirty-four million five hundred sixty-seven thousand eight hundred ninety",
        ),
        (-42, "minus forty-two"),
    ],
)
def test_cardinal(n, words):
    assert cardinal(n) == words


@pytest.mark.parametrize(
    "n, words",
    [
        (1, "first"),
        (2, "second"),
        (3, "third"),
        (4, "fourth"),
        (5, "fifth"),
        (8, "eighth"),
        (9, "ninth"),
        (11, "eleventh"),
        (12, "twelfth"),
        (20, "twentieth"),
        (21, "twenty-first"),
        (42, "forty-second"),
        (100, "one hundredth"),
        (103, "one hundred third"),
        (1000, "one thousandth"),
    ],
)
def test_ordinal(n, words):
    assert ordinal(n) == words


@pytest.mark.parametrize(
    "n, words",
    [
        (1999, "nineteen ninety-nine"),
        (1905, "nineteen oh five"),
        (1900, "nineteen hundred"),
        (2000, "two thousand"),
        (2005, "two thousand five"),
        (2010, "twenty ten"),
        (2023, "twenty twenty-three"),
        (1066, "ten sixty-six"),
    ],
)
def test_year(n, words):
    assert year(n) == words


def test_decimal():
    assert decimal("3.14") == "three point one four"
    assert decimal("0.05") == "zero point zero five"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("  Hello \n\t world  ", "Hello world"),
        ("It was 1999.", "It was nineteen ninety-nine."),
        ("In 2023 we had 1,999 cats.", "In twenty twenty-three we had one thousand nine hundred ninety-nine cats."),
        ("Call 007 now.", "Call zero zero seven now."),
        ("It costs $3.50.", "It costs three dollars and fifty cents."),
        ("Only $1, or $0.99, or $1.01!", "Only one dollar, or ninety-nine cents, or one dollar and one cent!"),
        ("$2.5 million", "two point five million dollars"),
        ("$1,000 and £5 and €20.", "one thousand dollars and five pounds and twenty euros."),
        ("50% off, then 3.5%", "fifty percent off, then three point five percent"),
        ("Pi is 3.14 and it is -5 outside.", "Pi is three point one four and it is minus five outside."),
        ("the 21st and 2nd place", "the twenty-first and second place"),
        ("It's 12/25/2023.", "It's December twenty-fifth, twenty twenty-three."),
        ("Meet at 3:30 pm or 10:05.", "Meet at three thirty p m or ten oh five."),
        ("at 7:00, or 5 a.m. tomorrow", "at seven o'clock, or five a m tomorrow"),
        ("the 1990s and the '80s", "the nineteen nineties and the eighties"),
        ("Dr. Smith lives on Elm Dr.", "Doctor Smith lives on Elm Drive."),
        ("St. Louis is near Baker St. today", "Saint Louis is near Baker Street today"),
        ("Mr. and Mrs. Jones met Prof. Lee.", "Mister and Missus Jones met Professor Lee."),
        ("fruit, e.g. apples, i.e. food", "fruit, for example apples, that is food"),
        ("cats vs. dogs", "cats versus dogs"),
        ("pears, etc. Then we left.", "pears, et cetera. Then we left."),
        ("pears, etc.", "pears, et cetera."),
        ("King Jr. said", "King Junior said"),
        ("No. 5 and #3", "Number five and number three"),
        ("R&D", "R and D"),
        ("\u201cIt\u2019s fine,\u201d she said.", '"It\'s fine," she said.'),
        ("Room 13/14", "Room thirteen/fourteen"),  # not a date: left as two numbers
        ("plain words stay as they are", "plain words stay as they are"),
    ],
)
def test_normalize_text(text, expected):
    assert normalize_text(text) == expected


def test_service_tokens_pass_through():
    text = "<|emo_happy|>I have 2 [laughter] cats <|spk_12|>"
    assert normalize_text(text) == "<|emo_happy|>I have two [laughter] cats <|spk_12|>"


def test_idempotent_on_its_output():
    once = normalize_text("On 12/25/2023 Dr. Who paid $3.50 for 21st-century tea, 50% off.")
    assert normalize_text(once) == once
    assert not any(c.isdigit() for c in once)
