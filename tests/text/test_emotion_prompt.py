"""The emotion token in Luna's instruction context (right after SOT) and inline event tags as service ids, through
the BPE and the phoneme tokenizer; without an emotion the prompt is exactly as before."""

import shutil

import pytest

from duet.errors import DuetError
from duet.text.bpe import BPEConfig, train_bpe
from duet.text.prompts import encode_prompt, gepard_prompt, luna_prompt, prepare_input, wrap_ids
from duet.text.tokens import EMOTIONS, service_ids

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs the espeak-ng program")
TEXTS = ["the cat sat on the mat", "well I never did", "hello there my friend", "laughing is good"]


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    """A duet BPE as a model loads it (``get_tokenizer``)."""
    from duet.text import get_tokenizer
    from duet.text.bpe import save_bpe

    path = save_bpe(train_bpe(TEXTS * 50, BPEConfig(vocab_size=300)), tmp_path_factory.mktemp("bpe") / "tok.json")
    return get_tokenizer(str(path))


def test_the_emotion_token_sits_after_sot_and_the_text_ids_are_unchanged(bpe):
    ids = service_ids(bpe)
    plain = luna_prompt("Well, I never did.", bpe)
    text_ids = bpe.encode(prepare_input("Well, I never did."), add_special_tokens=False)
    assert plain == [ids.sot, *text_ids, ids.eot]  # no emotion: as before emotions existed
    assert luna_prompt("Well, I never did.", bpe, emotion=None) == plain
    for name in EMOTIONS:
        assert luna_prompt("Well, I never did.", bpe, emotion=name) == [ids.sot, ids.emotion(name), *text_ids, ids.eot]
    assert gepard_prompt("Well.", bpe) == encode_prompt("Well.", bpe, start_of_speech=True)
    assert wrap_ids([7], ids, start_of_speech=True, emotion="sad") == [ids.sot, ids.emotion("sad"), 7, ids.eot, ids.sos]
    with pytest.raises(DuetError, match="unknown emotion 'bored'"):
        luna_prompt("Well.", bpe, emotion="bored")


def test_inline_tags_reach_the_prompt_as_one_service_id_each(bpe):
    ids = service_ids(bpe)
    prompt = luna_prompt("Well [laugh] I never [Sighs]", bpe, emotion="happy")
    assert prompt[:2] == [ids.sot, ids.emotion("happy")] and prompt[-2:] == [ids.nonverbal("sigh"), ids.eot]
    assert prompt.count(ids.nonverbal("laughter")) == 1
    assert [i for i in prompt if i in ids.all] == [ids.sot, ids.emotion("happy"), ids.nonverbal("laughter"),
                                                   ids.nonverbal("sigh"), ids.eot]


@needs_espeak
def test_the_phoneme_tokenizer_of_luna_tiny_keeps_tags_and_takes_the_emotion(tmp_path):
    from duet.text import get_tokenizer
    from duet.text.bpe import save_bpe
    from duet.text.phonemes import mark, phoneme_tokenizer_class, phonemize_many

    path = save_bpe(mark(train_bpe(phonemize_many(TEXTS * 30), BPEConfig(vocab_size=300))), tmp_path / "tok.json")
    tok = get_tokenizer(str(path))
    assert isinstance(tok, phoneme_tokenizer_class())
    ids = service_ids(tok)
    plain = luna_prompt("Well [laugh] I never.", tok)
    happy = luna_prompt("Well [laugh] I never.", tok, emotion="happy")
    assert happy == [plain[0], ids.emotion("happy"), *plain[1:]]  # the text's phoneme ids are the same
    assert [i for i in happy if i in ids.all] == [ids.sot, ids.emotion("happy"), ids.nonverbal("laughter"), ids.eot]
