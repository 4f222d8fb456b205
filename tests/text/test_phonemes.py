"""Phoneme input: espeak-ng IPA with punctuation and service tokens kept, carried by a marked BPE tokenizer.json."""

import shutil
import subprocess

import pytest

from duet.errors import DuetError
from duet.text import get_tokenizer
from duet.text.bpe import BPEConfig, load_bpe, save_bpe, train_bpe
from duet.text.phonemes import mark, marked_voice, phoneme_tokenizer_class, phonemize, phonemize_many

pytestmark = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs the espeak-ng program")

TEXTS = ["Hello there, my friend.", "Well [laughter] no!", "<|emo_happy|>Yes.", "It is five o'clock?",
         "the quick brown fox jumps over a lazy dog", "..."]


def espeak(text: str) -> str:
    """The IPA espeak-ng itself prints for one clause (no punctuation inside), whitespace collapsed."""
    out = subprocess.run(["espeak-ng", "-q", "--ipa", "-v", "en-us", text], capture_output=True, text=True, check=True)
    return " ".join(out.stdout.split())


def test_pieces_are_espeaks_ipa_with_punctuation_and_service_tokens_kept():
    assert phonemize("Hello there, my friend.") == f"{espeak('Hello there')}, {espeak('my friend')}."
    assert phonemize("Well [laughter] no!") == f"{espeak('Well')} [laughter] {espeak('no')}!"
    assert phonemize("<|emo_happy|>Yes.") == f"<|emo_happy|> {espeak('Yes')}."
    assert phonemize("...") == "..."
    assert "ð" in phonemize("the")  # it is IPA, not the spelling


def test_one_run_for_many_equals_one_run_each():
    assert phonemize_many(TEXTS) == [phonemize_many([t])[0] for t in TEXTS]


def test_texts_seen_before_do_not_run_espeak_again(monkeypatch):
    from duet.text import phonemes

    runs = []
    real = phonemes._espeak
    monkeypatch.setattr(phonemes, "_espeak", lambda pieces, voice: runs.append(list(pieces)) or real(pieces, voice))
    fresh = ["A text never seen before, surely.", "Nor this one!"]
    first = phonemize_many(fresh + fresh)
    assert runs == [["A text never seen before", "surely", "Nor this one"]]  # duplicates phonemised once
    assert phonemize(fresh[1]) == first[1] and phonemize_many(fresh) == first[:2]
    assert len(runs) == 1


def test_a_missing_voice_is_a_clear_error():
    with pytest.raises(DuetError, match="espeak-ng"):
        phonemize_many(["hello"], voice="no-such-voice-xx")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(plain BPE path, phoneme BPE path), both trained on the same IPA texts."""
    ipa = phonemize_many(TEXTS * 40)
    root = tmp_path_factory.mktemp("phon")
    plain = save_bpe(train_bpe(ipa, BPEConfig(vocab_size=300)), root / "plain" / "tokenizer.json")
    marked = save_bpe(mark(train_bpe(ipa, BPEConfig(vocab_size=300))), root / "marked" / "tokenizer.json")
    return plain, marked


def test_the_marker_travels_in_the_file_and_selects_the_phoneme_tokenizer(trained):
    import json

    plain, marked = trained
    assert marked_voice(json.loads(plain.read_text())) is None
    assert marked_voice(json.loads(marked.read_text())) == "en-us"
    tok = get_tokenizer(marked.parent)
    assert isinstance(tok, phoneme_tokenizer_class()) and tok.voice == "en-us"
    assert not isinstance(load_bpe(plain), phoneme_tokenizer_class())


def test_encode_phonemises_first_and_the_marker_changes_no_id(trained):
    plain, marked = trained
    plain_tok, phon_tok = load_bpe(plain), load_bpe(marked)
    assert len(plain_tok) == len(phon_tok)
    for text in ("Hello there, my friend.", "Well [laughter] no!", "the lazy fox says hello"):
        want = plain_tok.encode(phonemize(text), add_special_tokens=False)
        assert phon_tok.encode(text, add_special_tokens=False) == want
        assert phon_tok(text, add_special_tokens=False)["input_ids"] == want
    laugh = phon_tok.convert_tokens_to_ids("[laughter]")
    assert laugh in phon_tok.encode("Well [laughter] no!", add_special_tokens=False)  # one id, not IPA


def test_offsets_index_the_surface_string(trained):
    """Luna's duration weights count characters through token offsets: for a phoneme tokenizer those offsets
    are into the IPA (``surface``), and the tokens' spans rebuild it."""
    from duet.data.token_rows import token_weights
    from duet.text.phonemes import surface

    plain, marked = trained
    text = "Hello there, my friend."
    assert surface(load_bpe(plain), text) == text
    tok = load_bpe(marked)
    ipa = surface(tok, text)
    assert ipa == phonemize(text)
    enc = tok([text], add_special_tokens=False, return_offsets_mapping=True)
    offsets = enc["offset_mapping"][0]
    assert "".join(ipa[a:b] for a, b in offsets).replace(" ", "") == ipa.replace(" ", "")
    assert sum(token_weights(ipa, offsets)) == sum(not ch.isspace() for ch in ipa)


def test_the_plain_tokenizer_gives_the_transformers_tokenizers_ids(trained):
    """``duet speak`` reads a shipped model's tokenizer through ``tokenizers`` alone (``PlainBPE``): the same ids,
    length, service ids, voice and surface as the transformers tokenizer, for a plain and a phoneme BPE."""
    from duet.text.bpe import PlainBPE
    from duet.text.phonemes import phoneme_voice, surface
    from duet.text.tokens import service_ids

    for path in trained:
        full, light = load_bpe(path), get_tokenizer(path, plain=True)
        assert isinstance(light, PlainBPE) and len(light) == len(full)
        assert phoneme_voice(light) == phoneme_voice(full) and service_ids(light) == service_ids(full)
        for text in ("Hello there, my friend.", "Well [laughter] no!", "  the lazy   fox <|eot|>"):
            assert light.encode(text, add_special_tokens=False) == full.encode(text, add_special_tokens=False)
            assert surface(light, text) == surface(full, text)
    assert phoneme_voice(get_tokenizer(trained[1], plain=True)) == "en-us"
