"""Small byte-level BPE: deterministic training, exact round trips, service tokens as single ids."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from duet.errors import DuetError
from duet.text.bpe import BPEConfig, load_bpe, save_bpe, train_bpe
from duet.text.tokens import SERVICE_TOKENS, service_ids

WORDS = "the quick brown fox jumps over a lazy dog while speech models say hello to the world again".split()


def corpus(seed: int = 0, n: int = 600) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(1, 10))]
        out.append(" ".join(words).capitalize() + rng.choice([".", "!", "?", ","]))
    out += ["Well [laughter] no.<|eot|>"] * 300  # service tokens inside corpus text must not become merges
    return out


CONFIG = BPEConfig(vocab_size=400, min_frequency=2)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    path = tmp_path_factory.mktemp("bpe") / "tok" / "tokenizer.json"
    save_bpe(train_bpe(corpus(), CONFIG), path)
    return path


def test_layout_bytes_merges_then_service_tokens(trained):
    raw = json.loads(Path(trained).read_text())
    n = len(raw["model"]["vocab"])
    assert 256 < n <= CONFIG.vocab_size
    tok = load_bpe(trained)
    assert service_ids(tok).all == tuple(range(n, n + len(SERVICE_TOKENS)))
    assert len(tok) == n + len(SERVICE_TOKENS)
    # no merge was learnt from the service tokens that appeared in the corpus text
    merged = ["".join(pair) for pair in raw["model"]["merges"]]
    assert merged and not any("laughter" in m or "|>" in m for m in merged)


def test_merges_compress_the_training_text(trained):
    tok = load_bpe(trained)
    text = "The quick brown fox jumps over the lazy dog."
    assert len(tok.encode(text)) < len(text.encode()) / 2


@pytest.mark.parametrize(
    "text",
    [
        "The quick brown fox.",
        "  spaces\tand\nnewlines\r\n ",
        "never seen: zebra ÄÖÜ 你好 👍🏽 123.45",
        "",
    ],
)
def test_round_trip_exact(trained, text):
    tok = load_bpe(trained)
    assert tok.decode(tok.encode(text)) == text


def test_service_tokens_are_single_ids(trained):
    tok = load_bpe(trained)
    ids = service_ids(tok)
    for token, i in zip(SERVICE_TOKENS, ids.all, strict=True):
        assert tok.encode(token) == [i]
    enc = tok.encode("<|sot|>hello [laughter] world<|eot|><|sos|>")
    assert enc[0] == ids.sot and enc[-2:] == [ids.eot, ids.sos] and ids.nonverbal("laughter") in enc
    assert tok.decode(enc, skip_special_tokens=True) == "hello  world"
    assert tok.pad_token_id == ids.pad


def test_training_is_deterministic_across_processes(tmp_path, trained):
    # A fresh interpreter has fresh hash seeds (Python's and the Rust side's); the file must still be identical.
    other = tmp_path / "again.json"
    texts = tmp_path / "texts.json"
    texts.write_text(json.dumps(corpus()))
    script = (
        "import json, sys\n"
        "from duet.text.bpe import BPEConfig, save_bpe, train_bpe\n"
        "texts = json.loads(open(sys.argv[1]).read())\n"
        f"save_bpe(train_bpe(texts, BPEConfig(vocab_size={CONFIG.vocab_size}, min_frequency={CONFIG.min_frequency})),"
        " sys.argv[2])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    subprocess.run([sys.executable, "-c", script, str(texts), str(other)], check=True, env=env)
    assert other.read_bytes() == Path(trained).read_bytes()


def test_lowercase_option():
    tok = train_bpe(corpus(n=100), BPEConfig(vocab_size=280, lowercase=True))
    assert tok.encode("HELLO").ids == tok.encode("hello").ids


def test_bad_inputs(tmp_path):
    with pytest.raises(DuetError, match="exceed"):
        train_bpe(["a"], BPEConfig(vocab_size=256))
    with pytest.raises(DuetError, match="no tokenizer file"):
        load_bpe(tmp_path / "missing.json")
    from tokenizers import Tokenizer, models

    foreign = tmp_path / "foreign.json"
    Tokenizer(models.WordLevel({"a": 0}, unk_token="a")).save(str(foreign))
    with pytest.raises(DuetError, match="service token"):
        load_bpe(foreign)
