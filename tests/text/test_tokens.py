"""Service token inventory and id lookup."""

import pytest
from tokenizers import Tokenizer, models

from duet.errors import DuetError
from duet.text import tokens
from duet.text.tokens import (
    EMOTIONS,
    NONVERBALS,
    NUM_SPEAKER_TOKENS,
    SERVICE_TOKENS,
    emotion_token,
    nonverbal_token,
    service_ids,
    speaker_token,
    token_id,
)


def test_inventory_order_and_size():
    assert SERVICE_TOKENS[:4] == ("<|sot|>", "<|eot|>", "<|sos|>", "<|pad|>")
    assert SERVICE_TOKENS[4] == "<|emo_neutral|>"
    assert SERVICE_TOKENS[4 + len(EMOTIONS)] == "[breath]"
    assert SERVICE_TOKENS[-1] == f"<|spk_{NUM_SPEAKER_TOKENS - 1}|>"
    assert len(SERVICE_TOKENS) == 4 + len(EMOTIONS) + len(NONVERBALS) + NUM_SPEAKER_TOKENS == 150
    assert len(set(SERVICE_TOKENS)) == len(SERVICE_TOKENS)
    # Luna-TTS §6.2 scores these four events; they must exist
    assert {"breath", "cough", "laughter", "sigh"} <= set(NONVERBALS)


def test_token_builders_and_errors():
    assert emotion_token("happy") == "<|emo_happy|>"
    assert nonverbal_token("laughter") == "[laughter]"
    assert speaker_token(0) == "<|spk_0|>"
    with pytest.raises(DuetError, match="unknown emotion"):
        emotion_token("bored")
    with pytest.raises(DuetError, match="non-verbal"):
        nonverbal_token("burp")
    with pytest.raises(DuetError, match="outside"):
        speaker_token(NUM_SPEAKER_TOKENS)


def _tokenizer_with_service_tokens(offset: int) -> Tokenizer:
    vocab = {f"w{i}": i for i in range(offset)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tok.add_special_tokens(list(SERVICE_TOKENS))
    return tok


@pytest.mark.parametrize("offset", [1, 37])
def test_service_ids_follow_the_tokenizer(offset):
    ids = service_ids(_tokenizer_with_service_tokens(offset))
    assert (ids.sot, ids.eot, ids.sos, ids.pad) == (offset, offset + 1, offset + 2, offset + 3)
    assert ids.emotion("neutral") == offset + 4
    assert ids.emotion("whisper") == offset + 4 + EMOTIONS.index("whisper")
    assert ids.nonverbal("breath") == offset + 4 + len(EMOTIONS)
    assert ids.speaker(5) == offset + 4 + len(EMOTIONS) + len(NONVERBALS) + 5
    assert ids.all == tuple(range(offset, offset + len(SERVICE_TOKENS)))
    with pytest.raises(DuetError):
        ids.emotion("bored")


def test_missing_token_is_a_clear_error():
    tok = Tokenizer(models.WordLevel({"a": 0}, unk_token="a"))
    with pytest.raises(DuetError, match=r"no service token '<\|sot\|>'"):
        service_ids(tok)
    with pytest.raises(DuetError):
        token_id(tok, tokens.SOS)


def test_transformers_tokenizer_lookup():
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_object=_tokenizer_with_service_tokens(10))
    assert service_ids(hf).sot == 10
    assert token_id(hf, "[sigh]") == 10 + 4 + len(EMOTIONS) + NONVERBALS.index("sigh")
