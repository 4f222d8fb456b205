"""Inline event tags and the emotion token through the text side: spellings -> one service token, kept whole by
normalisation, phonemisation and BPE, in their places."""

import shutil

import pytest

from duet.errors import DuetError
from duet.text.bpe import BPEConfig, train_bpe
from duet.text.normalize import normalize_text
from duet.text.tags import canonical_tags, event_name, insert_tags, split_tags, spoken_words, with_emotion
from duet.text.tokens import service_ids

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs the espeak-ng program")


def test_spellings_become_the_one_token_of_their_event():
    assert canonical_tags("Well [laugh] no [Sighs] [clears throat] [breath]") == \
        "Well [laughter] no [sigh] [clear_throat] [breath]"
    assert canonical_tags("a [sic] note [1] and [laughter]") == "a [sic] note [1] and [laughter]"
    assert event_name("Laughing") == "laughter" and event_name("burp") is None


def test_split_and_insert_are_inverse_and_count_words_as_the_timing_does():
    text = "Well, [laugh] I never [cough] did. [sigh]"
    tagged = split_tags(text)
    assert tagged.spoken == "Well, I never did."
    assert tagged.events == (("laughter", 1), ("cough", 3), ("sigh", 4))
    assert insert_tags(tagged.spoken, list(tagged.events)) == "Well, [laughter] I never [cough] did. [sigh]"
    assert split_tags("[breath] Hello there.").events == (("breath", 0),)
    assert spoken_words("Dr. Who paid $3.50 -- twice!") == ["Dr", "Who", "paid", "$3.50", "twice"]
    assert spoken_words("it's a well-known 'fact'") == ["it's", "a", "well-known", "fact"]
    assert spoken_words("... what?") == ["what"]
    with pytest.raises(DuetError, match="inside a word"):
        split_tags("wo[cough]rd")


def test_normalisation_keeps_tags_and_emotion_in_place():
    text = with_emotion("I owe $5 [Laughs] to Dr. Smith [breath].", "happy")
    assert normalize_text(text) == "<|emo_happy|>I owe five dollars [laughter] to Doctor Smith [breath]."
    assert normalize_text("[laugh]") == "[laughter]"


def _bpe():
    texts = ["the cat sat on the mat", "well I never did", "hello there my friend", "laughing is good"] * 50
    return train_bpe(texts, BPEConfig(vocab_size=300))


def test_bpe_reads_each_tag_as_one_service_id_in_its_place():
    tok = _bpe()
    ids = service_ids(tok)
    text = normalize_text(with_emotion("Well [laugh] I never [sigh]", "sad"))
    enc = tok.encode(text)
    assert enc.ids[0] == ids.emotion("sad")
    laugh, sigh = enc.ids.index(ids.nonverbal("laughter")), enc.ids.index(ids.nonverbal("sigh"))
    assert tok.decode(enc.ids[1:laugh]).strip() == "Well"
    assert tok.decode(enc.ids[laugh + 1 : sigh]).strip() == "I never"
    assert sigh == len(enc.ids) - 1
    assert sum(i in ids.all for i in enc.ids) == 3  # nothing else became a service id, and no tag was split


@needs_espeak
def test_phonemes_keep_tags_whole_and_between_the_right_words():
    from duet.text.phonemes import _espeak, phonemize

    ipa = phonemize("<|emo_angry|>Well [laugh] I never [cough].")
    assert ipa == phonemize("<|emo_angry|>Well [laughter] I never [cough].")
    well, never = _espeak(["Well", "I never"], "en-us")
    assert ipa == f"<|emo_angry|> {well} [laughter] {never} [cough]."


@needs_espeak
def test_a_phoneme_tokenizer_gives_one_id_per_tag(tmp_path):
    from duet.text.bpe import load_bpe, save_bpe
    from duet.text.phonemes import mark, phonemize_many

    ipa = phonemize_many(["the cat sat on the mat", "well I never did", "hello there my friend"] * 30)
    path = save_bpe(mark(train_bpe(ipa, BPEConfig(vocab_size=300))), tmp_path / "tokenizer.json")
    tok = load_bpe(path)
    ids = service_ids(tok)
    enc = tok.encode(normalize_text(with_emotion("Well [laugh] I never [Sighs]", "whisper")), add_special_tokens=False)
    assert enc[0] == ids.emotion("whisper") and enc[-1] == ids.nonverbal("sigh")
    assert enc.count(ids.nonverbal("laughter")) == 1 and 1 < enc.index(ids.nonverbal("laughter")) < len(enc) - 2
