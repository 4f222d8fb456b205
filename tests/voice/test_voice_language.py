"""A voice's language reaches inference: a model whose phoneme tokenizer is marked for Spanish reads its text as
Spanish (numbers left to espeak-ng), an English one as normalised English."""

from __future__ import annotations

from voice_testing import write_tiny_base

from duet.tts import load_runtime
from duet.voice.language import base_for_language


def test_the_runtime_prepares_text_in_the_tokenizers_language(tmp_path):
    base, codec = write_tiny_base(tmp_path / "base")
    english = load_runtime(base, codec=str(codec))
    spanish_dir = base_for_language(base, "es-419", tmp_path / "es")
    spanish = load_runtime(spanish_dir, codec=str(codec))
    assert english.language == "en" and spanish.language == "es-419"
    # "7" is written out as "seven" in English before phonemising; Spanish text goes to espeak-ng as written
    assert english.encode("7") == english.encode("seven")
    assert spanish.encode("7") != spanish.encode("seven")
